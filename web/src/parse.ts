// What a person types into a card, read into what the API takes. Each
// parser returns the value, or a string saying why the text is refused;
// a refused entry sends nothing.
import type { JsonObject } from "@bufbuild/protobuf";

const maxUint32 = 2 ** 32 - 1;
const maxUint64 = 2n ** 64n - 1n;

// count reads a whole number of what (steps, tokens, tool calls) to add;
// an empty entry is none. max is the field's largest value.
export function count(text: string, what: string, max: bigint = maxUint64): bigint | string {
  const t = text.trim();
  if (t === "") return 0n;
  if (!/^\d+$/.test(t)) return `${what}: "${t}" is not a whole number of 0 or more`;
  const n = BigInt(t);
  if (n > max) return `${what}: ${t} is more than ${max}`;
  return n;
}

// count32 is count for a field of 32 bits (steps, tool calls).
export function count32(text: string, what: string): number | string {
  const n = count(text, what, BigInt(maxUint32));
  return typeof n === "string" ? n : Number(n);
}

// usd reads an amount of US dollars to add; an empty entry is none.
export function usd(text: string): number | string {
  const t = text.trim();
  if (t === "") return 0;
  if (!/^\d+(\.\d+)?$|^\.\d+$/.test(t)) return `USD: "${t}" is not an amount such as 2 or 0.50`;
  return Number(t);
}

const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000 };

// duration reads a span such as "30m", "1h30m" or "90s" (hours, minutes,
// seconds, each a number, as Go writes a duration) into milliseconds; an
// empty entry is none.
export function duration(text: string): number | string {
  const t = text.trim().replace(/\s+/g, "");
  if (t === "") return 0;
  const parts = [...t.matchAll(/(\d+(?:\.\d+)?)([hms])/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join("") !== t) {
    return `extend deadline: "${text.trim()}" is not a duration such as 30m, 1h30m or 90s (h, m and s only)`;
  }
  const ms = Math.round(parts.reduce((sum, p) => sum + Number(p[1]) * units[p[2]], 0));
  if (ms <= 0) return `extend deadline: "${text.trim()}" adds no time`;
  return ms;
}

// argumentsObject reads a proposal's revised arguments: JSON, and an
// object (a tool's arguments are a google.protobuf.Struct).
export function argumentsObject(text: string): JsonObject | string {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return `the arguments are not JSON: ${err instanceof Error ? err.message : String(err)}`;
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    return `the arguments must be a JSON object ({"name": value, …}), not ${v === null ? "null" : Array.isArray(v) ? "an array" : typeof v}`;
  }
  return v as JsonObject;
}
