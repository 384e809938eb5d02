// How a tool's arguments and previews read: as fields, keys in one stable
// (code-point) order everywhere the console shows them (the card, the run
// page, the edit box), nested values behind <details>, long values folded.
// A revision reads as the fields it changed, old → new. Every value
// becomes a text node.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { cut, h } from "./dom";

// byKey orders keys by code point, the same in every browser and locale.
export function byKey(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

// sortedKeys is v with every object's keys in byKey order, recursively.
export function sortedKeys(v: JsonValue): JsonValue {
  if (Array.isArray(v)) return v.map(sortedKeys);
  if (v && typeof v === "object") {
    const out: JsonObject = {};
    for (const k of Object.keys(v).sort(byKey)) out[k] = sortedKeys((v as JsonObject)[k]!);
    return out;
  }
  return v;
}

// stableJson is v as JSON, keys sorted; indent as JSON.stringify's.
export function stableJson(v: JsonValue | undefined, indent?: number): string {
  return v === undefined ? "" : JSON.stringify(sortedKeys(v), null, indent);
}

// Field is one line of a value read as fields: its key (a JSON pointer's
// last segment, or an index) and, for a leaf, its text; a nested object
// or array has its own fields.
export type Field = { key: string; text?: string; fields?: Field[]; size?: number };

// fields reads v as fields in stable order: an object's keys sorted, an
// array's items by index. A leaf reads as JSON (strings without quotes).
export function fields(v: JsonValue): Field[] {
  const entries: [string, JsonValue][] = Array.isArray(v)
    ? v.map((x, i) => [String(i), x])
    : Object.keys(v as JsonObject).sort(byKey).map((k) => [k, (v as JsonObject)[k]!]);
  return entries.map(([key, x]) => nested(x) ? { key, fields: fields(x), size: entriesOf(x) } : { key, text: leaf(x) });
}

function nested(v: JsonValue): v is JsonObject | JsonValue[] {
  return v !== null && typeof v === "object";
}

function entriesOf(v: JsonObject | JsonValue[]): number {
  return Array.isArray(v) ? v.length : Object.keys(v).length;
}

// leaf is a scalar's text: a string as itself, anything else as JSON.
export function leaf(v: JsonValue | undefined): string {
  if (v === undefined) return "(none)";
  return typeof v === "string" ? v : stableJson(v);
}

// Change is one field a revision changed: its JSON pointer, and its value
// before and after (undefined when added or removed).
export type Change = { path: string; before?: JsonValue; after?: JsonValue };

// changes lists, in stable order, the leaves that differ between before
// and after, by JSON pointer (RFC 6901). An object or array is walked
// into; a value that changes kind is one change.
export function changes(before: JsonValue | undefined, after: JsonValue | undefined, path = ""): Change[] {
  const obj = (v: JsonValue | undefined): v is JsonObject => v !== null && typeof v === "object" && !Array.isArray(v);
  if (obj(before) && obj(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort(byKey);
    return keys.flatMap((k) => changes(before[k], after[k], `${path}/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`));
  }
  if (Array.isArray(before) && Array.isArray(after)) {
    const n = Math.max(before.length, after.length);
    return Array.from({ length: n }, (_, i) => changes(before[i], after[i], `${path}/${i}`)).flat();
  }
  if (stableJson(before) === stableJson(after)) return [];
  return [{ path: path || "/", before, after }];
}

// fieldList draws v as a definition list: a nested value behind a
// <details> that says how many fields it holds, a long value folded.
export function fieldList(v: JsonValue | undefined, cls = "fields"): HTMLElement {
  if (v === undefined) return h("p", { class: "note" }, "(none)");
  if (!nested(v)) return h("p", { class: `${cls} leaf text` }, cut(leaf(v)));
  return draw(fields(v), cls);
}

function draw(fs: Field[], cls: string): HTMLElement {
  if (!fs.length) return h("p", { class: `${cls} note` }, "(empty)");
  const dl = h("dl", { class: cls });
  for (const f of fs) {
    dl.append(h("dt", {}, f.key), h("dd", { "data-key": f.key },
      f.fields
        ? h("details", {}, h("summary", {}, `${f.size} ${f.size === 1 ? "field" : "fields"}`), draw(f.fields, "fields"))
        : cut(f.text ?? "")));
  }
  return dl;
}

// changeList draws a revision's changes, field by field: old → new.
export function changeList(cs: Change[]): HTMLElement {
  const ul = h("ul", { class: "changes" });
  for (const c of cs) {
    ul.append(h("li", { "data-path": c.path },
      h("code", {}, c.path), ": ",
      h("del", {}, cut(leaf(c.before), 120)), " → ",
      h("ins", {}, cut(leaf(c.after), 120))));
  }
  return ul;
}
