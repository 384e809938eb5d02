// The text of the model call in flight as the run page keeps it
// (src/output.ts), message by message as WatchRun sends them. Bundled
// into format.test.ts's run (npm test builds that one file).
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { EventSchema } from "../src/gen/rein/v1/event_pb";
import { ModelOutputSchema } from "../src/gen/rein/v1/run_service_pb";
import { afterEvent, applyOutput, writingTitle, type Writing } from "../src/output";

const out = (m: MessageInitShape<typeof ModelOutputSchema>) => create(ModelOutputSchema, { requested: 5n, step: 2, attempt: 1, ...m });

// feed applies the messages in turn from nothing shown.
function feed(...ms: MessageInitShape<typeof ModelOutputSchema>[]): Writing | undefined {
  return ms.reduce<Writing | undefined>((w, m) => applyOutput(w, out(m)), undefined);
}

test("text is added at the offset where the text shown ends, counted in UTF-8 bytes", () => {
  const w = feed({ text: "Hé " }, { offset: 4n, text: "wörld → " }, { offset: 15n, text: "🙂!" });
  assert.equal(w?.text, "Hé wörld → 🙂!");
  assert.equal(w?.bytes, 20n);
  assert.equal(w?.step, 2);
  assert.equal(w?.requested, 5n);
  assert.equal(w?.truncated, false);
});

test("a message at another offset is ignored", () => {
  const w = feed({ text: "abc" });
  for (const m of [{ offset: 2n, text: "c-again" }, { offset: 9n, text: "later" }]) {
    assert.equal(applyOutput(w, out(m)), w, `offset ${m.offset}`);
  }
  // Another call's text, not at offset 0, is not added either.
  assert.equal(applyOutput(w, out({ requested: 9n, offset: 3n, text: "d" })), w);
  assert.equal(applyOutput(w, out({ attempt: 2, offset: 3n, text: "d" })), w);
  // With nothing shown, only offset 0 starts a call.
  assert.equal(applyOutput(undefined, out({ offset: 3n, text: "d" })), undefined);
});

test("offset 0 starts over: a retry, a resumed call, a watch that joined mid-call", () => {
  const w = feed({ text: "first try" });
  const retry = applyOutput(w, out({ attempt: 2, text: "second" }));
  assert.deepEqual([retry?.text, retry?.attempt, retry?.bytes], ["second", 2, 6n]);
  assert.equal(writingTitle(retry!), "The model is writing… step 2 (retry)");
  const resumed = applyOutput(w, out({ resumed: true, text: "again" }));
  assert.deepEqual([resumed?.text, resumed?.resumed], ["again", true]);
  assert.equal(writingTitle(resumed!), "The model is writing… step 2 (sent again: the call before it was cut)");
  // The text so far, sent again to a watch that resumed.
  assert.equal(applyOutput(w, out({ text: "first try, more" }))?.text, "first try, more");
  assert.equal(writingTitle(w!), "The model is writing… step 2");
});

test("a call with no text yet is shown, empty", () => {
  const w = feed({});
  assert.deepEqual([w?.text, w?.bytes], ["", 0n]);
  // A message with nothing new leaves what is shown as it was.
  const a = feed({ text: "a" });
  assert.equal(applyOutput(a, out({ offset: 1n })), a);
});

test("done ends the call; truncated is kept", () => {
  assert.equal(feed({ text: "abc" }, { offset: 3n, text: "def", done: true }), undefined);
  assert.equal(feed({ text: "abc", done: true }), undefined);
  // The end of the call shown ends it, even at an offset that does not match.
  assert.equal(feed({ text: "abc" }, { offset: 7n, done: true }), undefined);
  // The end of another call does not.
  assert.equal(feed({ text: "abc" }, { requested: 3n, offset: 7n, done: true })?.text, "abc");
  const cut = feed({ text: "abc" }, { offset: 3n, text: "d", truncated: true }, { offset: 4n, truncated: true });
  assert.deepEqual([cut?.text, cut?.truncated], ["abcd", true]);
  const flagged = feed({ text: "abc" }, { offset: 3n, truncated: true });
  assert.deepEqual([flagged?.text, flagged?.truncated], ["abc", true]);
});

test("the events that end a call hide it; others, and earlier ones, do not", () => {
  const w = feed({ text: "abc" });
  const ev = (sequence: bigint, payload: MessageInitShape<typeof EventSchema>["payload"]) => create(EventSchema, { sequence, payload });
  for (const p of [
    { case: "modelReturned", value: {} },
    { case: "modelRetried", value: {} },
    { case: "statusChanged", value: {} },
    { case: "budgetReached", value: {} },
    { case: "runTaken", value: {} },
    { case: "modelRequested", value: {} },
  ] as const) {
    assert.equal(afterEvent(w, ev(6n, p)), undefined, p.case);
    assert.equal(afterEvent(w, ev(5n, p)), w, `${p.case} at the call's own sequence`);
  }
  assert.equal(afterEvent(w, ev(6n, { case: "runSteered", value: {} })), w);
  assert.equal(afterEvent(undefined, ev(6n, { case: "modelReturned", value: {} })), undefined);
});
