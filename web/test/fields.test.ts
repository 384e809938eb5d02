// The card's pure parts: fields in one stable order, a revision's changes
// field by field, times in a zone with its offset.
import { test } from "node:test";
import assert from "node:assert/strict";
import { changes, fields, stableJson } from "../src/fields";
import { zoned } from "../src/format";

test("fields come in code-point key order, nested values with their own fields", () => {
  const got = fields({ zeta: 1, Amount: "600.00", alpha: { b: true, a: null }, list: ["x", { k: 2 }] });
  assert.deepEqual(got, [
    { key: "Amount", text: "600.00" },
    { key: "alpha", fields: [{ key: "a", text: "null" }, { key: "b", text: "true" }], size: 2 },
    { key: "list", fields: [{ key: "0", text: "x" }, { key: "1", fields: [{ key: "k", text: "2" }], size: 1 }], size: 2 },
    { key: "zeta", text: "1" },
  ]);
});

test("the same value in any key order reads the same, as fields and as JSON", () => {
  const a = { b: { d: 1, c: [2, { f: 3, e: 4 }] }, a: "x" };
  const b = { a: "x", b: { c: [2, { e: 4, f: 3 }], d: 1 } };
  assert.deepEqual(fields(a), fields(b));
  assert.equal(stableJson(a), stableJson(b));
  assert.equal(stableJson(a), '{"a":"x","b":{"c":[2,{"e":4,"f":3}],"d":1}}');
});

test("changes lists each changed leaf, old → new, by JSON pointer", () => {
  const got = changes(
    { amount: "1200.00", currency: "EUR", to: { iban: "DE1", name: "Ann" }, tags: ["a"], "a/b": 1 },
    { amount: 600, currency: "EUR", to: { iban: "DE2", name: "Ann" }, tags: ["a", "b"], note: "half", "a/b": 1 },
  );
  assert.deepEqual(got, [
    { path: "/amount", before: "1200.00", after: 600 },
    { path: "/note", before: undefined, after: "half" },
    { path: "/tags/1", before: undefined, after: "b" },
    { path: "/to/iban", before: "DE1", after: "DE2" },
  ]);
});

test("changes: nothing changed is no change; a removed field and a changed kind are one change each", () => {
  assert.deepEqual(changes({ a: 1, b: [1] }, { b: [1], a: 1 }), []);
  assert.deepEqual(changes({ a: 1, b: { c: 1 } }, { b: "flat" }), [
    { path: "/a", before: 1, after: undefined },
    { path: "/b", before: { c: 1 }, after: "flat" },
  ]);
});

test("zoned writes the time at the offset, with the offset", () => {
  const d = new Date(Date.UTC(2026, 11, 1, 13, 5, 9));
  assert.equal(zoned(d, 60), "2026-12-01 14:05:09 (UTC+01:00)");
  assert.equal(zoned(d, 0), "2026-12-01 13:05:09 (UTC+00:00)");
  assert.equal(zoned(d, -570), "2026-12-01 03:35:09 (UTC-09:30)");
  assert.equal(zoned(new Date(Date.UTC(2026, 11, 31, 23, 30)), 330), "2027-01-01 05:00:00 (UTC+05:30)");
});
