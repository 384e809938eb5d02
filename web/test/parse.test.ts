// The parsers of what a person types into a card (src/parse.ts): each
// gives the value the API takes, or says why the text is refused. Bundled
// into format.test.ts's run (npm test builds that one file).
import { test } from "node:test";
import assert from "node:assert/strict";
import { argumentsObject, count, count32, duration, usd } from "../src/parse";

test("duration reads hours, minutes and seconds as Go writes them", () => {
  for (const [text, ms] of [["", 0], ["30m", 1_800_000], ["1h30m", 5_400_000], ["90s", 90_000], [" 1h 5s ", 3_605_000], ["1.5h", 5_400_000], ["0.5s", 500]] as const) {
    assert.equal(duration(text), ms, text);
  }
  for (const text of ["30", "m", "30x", "1d", "-5m", "30m!", "1h30", "0s", "0m0s"]) {
    const got = duration(text);
    assert.equal(typeof got, "string", `${text} read as ${got}`);
    assert.match(got as string, /^extend deadline: /);
  }
});

test("counts are whole numbers within their field", () => {
  assert.equal(count("", "add tokens"), 0n);
  assert.equal(count(" 12 ", "add tokens"), 12n);
  assert.equal(count("18446744073709551615", "add tokens"), 2n ** 64n - 1n);
  assert.match(count("18446744073709551616", "add tokens") as string, /^add tokens: .* is more than/);
  assert.equal(count32("4294967295", "add steps"), 4294967295);
  assert.match(count32("4294967296", "add steps") as string, /^add steps: /);
  for (const text of ["1.5", "-1", "1e3", "two"]) assert.match(count32(text, "add steps") as string, /is not a whole number/, text);
});

test("usd reads an amount of dollars", () => {
  assert.equal(usd(""), 0);
  assert.equal(usd("2"), 2);
  assert.equal(usd("0.50"), 0.5);
  assert.equal(usd(".25"), 0.25);
  for (const text of ["-1", "1,5", "$2", "NaN", "Infinity"]) assert.match(usd(text) as string, /^USD: /, text);
});

test("revised arguments are a JSON object", () => {
  assert.deepEqual(argumentsObject('{"path": "notes.txt", "n": [1, 2]}'), { path: "notes.txt", n: [1, 2] });
  assert.match(argumentsObject("{not json") as string, /^the arguments are not JSON: /);
  assert.match(argumentsObject("[1]") as string, /must be a JSON object.*not an array/);
  assert.match(argumentsObject("null") as string, /not null/);
  assert.match(argumentsObject('"text"') as string, /not string/);
});
