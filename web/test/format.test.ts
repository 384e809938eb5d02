// The console's event lines (src/format.ts) against the kinds rein's Go side
// declares (internal/eventkind): its fixture, testdata/summaries.json, holds
// a sample event of every kind and the line the CLI prints for it, and is
// generated and checked for drift by `go test ./internal/eventkind`. Run
// with `npm test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { EventSchema } from "../src/gen/rein/v1/event_pb";
import { RunSchema, RunStatus } from "../src/gen/rein/v1/run_pb";
import { decided, pauseEnds, summary } from "../src/format";
// npm test bundles this file only: the parsers' tests, and those of the
// model output's text, come with it.
import "./parse.test";
import "./output.test";
import "./fields.test";

type Case = { kind: string; event: JsonValue; summary: string };

// npm runs the tests in web/.
const fixture: { kinds: Case[] } = JSON.parse(readFileSync("../internal/eventkind/testdata/summaries.json", "utf8"));

// lines are, by kind, the CLI's line for the fixture's sample and the
// console's. The console shows more (arguments, outputs, answers) and says
// it in its own words, so the two differ; what keeps them in step is that a
// change to the CLI's line fails here until the console's line has been
// looked at beside it, and the pair below updated.
const lines: Record<string, [cli: string, console: string]> = {
  run_started: ['goal "goal", 1 tools', "by principal: goal (fork of parent-run-id at 7)"],
  model_requested: ["step 1, model, ~3 input tokens, begins with 13 bytes of the last call's input, sent again: the call before it was cut by a crash", "step 1, model, ~3 input tokens, begins with 13 bytes of the last call's input"],
  model_returned: ["tool_call tool ($0.375000, 1.25s, finish-reason)", 'calls tool {"key":"value"} (1 in, 2 out, 1.25s)'],
  decision_rejected: ["error", "error: raw"],
  tool_requested: ["tool", 'tool {"key":"value"}'],
  tool_refused: ["tool: reason", "tool: reason"],
  tool_returned: ["tool error (1.25s): error", "tool failed: error (cut at 6 bytes) (1.25s)"],
  approval_requested: ["tool proposal-id, hash hash…", "tool proposal proposal-id, hash hash, expires 2026-12-01 10:00:00 (UTC+00:00)"],
  approval_decided: ['proposal-id approved by principal:ana "reason"', "principal:ana approved proposal-id: reason (and ended the run)"],
  input_requested: ['"text"', "text"],
  input_provided: ['"text" by principal:ana', "principal:ana: text"],
  write_dispatched: ["operation operation-id", "proposal-id as operation-id"],
  write_committed: ['operation operation-id, receipt "value", in 1.25s', 'proposal-id: "value" (1.25s)'],
  write_outcome_unknown: ["operation operation-id: error", "proposal-id: error"],
  checks_completed: ["1 check: 1 passed, in 1.25s", "name passed"],
  budget_reached: ["limit: detail", "limit: detail"],
  status_changed: ["needs_input → needs_approval (reason): error", "needs_input → needs_approval: reason; answer: text; error: error"],
  model_retried: ["step 1, retry in 1.25s: error", "step 1: error; retrying after 1.25s"],
  context_compacted: ["2 entries summarised, 4 → 5 characters", "step 1: 2 items compacted, 4 → 5 characters"],
  write_refused: ["operation operation-id refused: reason", "proposal-id: reason"],
  delegation_started: ["children run-id (1 steps, 2 tokens, $0.750000, 4 tool calls)", "1 child run(s): run-id: goal"],
  delegation_returned: ['run-id needs_approval, 8 steps, 3 tokens, $0.875000: "text"', "run-id needs_approval (reason): text, 8 steps, $0.8750"],
  run_taken: ["carried on by owner (lease epoch 2)", "carried on by owner (lease epoch 2)"],
  run_steered: ['"text" by principal:ana', "principal:ana: text"],
  budget_raised: ["+1 steps, +2 tokens, +$0.38, +8 tool calls, deadline +1.25s by principal:ana", "principal:ana raised the budget: +1 steps, +2 tokens, +$0.38, +8 tool calls, deadline +1.25s (reason)"],
  policy_decided: [
    'tool allow by server rule "rule", 8 approvals (when when): message [failed closed: error]',
    'tool allow by server rule "rule", 8 approvals (when when): message [failed closed: error]',
  ],
  model_throttled: ["step 1 waited 1.25s for bucket", "step 1 waited 1.25s for bucket"],
  run_admitted: ["started after 1.25s in the queue by by", "started after 1.25s in the queue by by"],
  approval_given: ["proposal-id approved by principal:ana (2 of 3)", "proposal-id approved by principal:ana (2 of 3)"],
  proposal_revised: ['superseded-proposal-id → proposal-id by principal:ana: path "value" → "value"', 'principal:ana revised superseded-proposal-id into proposal-id: path "value" → "value"'],
  tool_changed: ["tool changed (changes) since the run was granted it: action", "tool changed (changes) under proposal proposal-id: action"],
  tool_adopted: ["tool moved to its new definition (changes) by principal:ana", "principal:ana moved tool to its new definition (changes)"],
};

test("the fixture holds every kind of this console's generated client", () => {
  const payload = EventSchema.oneofs.find((o) => o.name === "payload");
  assert.ok(payload, "rein.v1.Event has no payload oneof");
  assert.deepEqual(
    fixture.kinds.map((c) => c.kind),
    payload.fields.map((f) => f.name),
    "the Go side's kinds and web/src/gen differ: regenerate both from proto/",
  );
});

test("every kind has its own line", () => {
  for (const c of fixture.kinds) {
    const s = summary(fromJson(EventSchema, c.event));
    assert.equal(s.kind, c.kind, `format.ts's summary does not know ${c.kind}: give it a case`);
    assert.notEqual(s.text, "", `${c.kind} reads as an empty line`);
  }
});

test("an event of a kind the formatter does not know reads as a bare event", () => {
  assert.deepEqual(summary(fromJson(EventSchema, { runId: "run_1", sequence: "7" })), { kind: "event", text: "" });
});

test("the console's line for each kind is in step with the CLI's", () => {
  assert.deepEqual(Object.keys(lines).sort(), fixture.kinds.map((c) => c.kind).sort(), "lines has a pair for each kind, and only those");
  for (const c of fixture.kinds) {
    const [cli, want] = lines[c.kind];
    assert.equal(
      c.summary,
      cli,
      `the CLI's line for ${c.kind} changed: bring the console's line (web/src/format.ts) in step with it, then update its pair in web/test/format.test.ts`,
    );
    assert.equal(summary(fromJson(EventSchema, c.event)).text, want, `the console's line for ${c.kind}`);
  }
});

// waitingRun is a run paused on a write that needs approvals approvers, of
// whom approvedBy approved it.
function waitingRun(approvals: number, approvedBy: string[]) {
  return create(RunSchema, {
    runId: "run_1", principal: "carol", status: RunStatus.NEEDS_APPROVAL,
    pending: { action: { case: "proposal", value: { proposalId: "prop_1", hash: "h", approvals, approvedBy } } },
  });
}

test("an approval that leaves the write waiting says who else must approve it", () => {
  assert.equal(
    decided(true, waitingRun(2, ["alice"]), "prop_1"),
    "approved: the write waits for 1 more approver (1 of 2 approvals given): not carol, who started the run, nor alice, who approved it",
  );
  assert.equal(
    decided(true, waitingRun(3, ["alice"]), "prop_1"),
    "approved: the write waits for 2 more approvers (1 of 3 approvals given): not carol, who started the run, nor alice, who approved it",
  );
});

test("an approval that decides the write says how the run stands", () => {
  assert.equal(decided(true, create(RunSchema, { runId: "run_1", status: RunStatus.RUNNING }), "prop_1"), "approved: the run is running");
  // A revision pending now is another proposal: this one was decided.
  assert.equal(decided(true, waitingRun(2, []), "prop_0"), "approved: the run is needs_approval");
  assert.equal(decided(false, waitingRun(2, ["alice"]), "prop_1"), "denied: the run is needs_approval");
});

test("a pause says when it ends and what ends it, as the server derives it", () => {
  const run = (endsBy: string) => fromJson(RunSchema, {
    runId: "run_1", status: "RUN_STATUS_NEEDS_APPROVAL", deadline: "2026-12-01T10:02:00Z",
    pending: { proposal: { proposalId: "p", expiresAt: "2026-12-01T11:00:00Z" }, endsAt: "2026-12-01T10:02:00Z", endsBy },
  });
  assert.match(pauseEnds(run("run_deadline")), /^2026-12-01 10:02:00 \(UTC\+00:00\) \(the run's deadline: the run then ends budget_exhausted\)$/);
  assert.match(pauseEnds(run("proposal_ttl")), /\(the proposal expires: the run then ends expired\)$/);
  assert.equal(pauseEnds(create(RunSchema, { runId: "run_2" })), "");
});
