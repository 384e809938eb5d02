// Start, watch and decide on runs against a real rein serve; each success
// beside the refusal that is its twin.
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { test } from "node:test";
import { fromBinary, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";

import {
  approvalsWanted,
  ConflictError,
  connect,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  OutOfRangeError,
  pauseEnds,
  pendingProposal,
  ReinError,
  RunExportSchema,
  RunStatus,
  toReinError,
  waitsForPerson,
  type Event,
} from "../src/index.js";
import { pkgDir, refundContract, reinBin, repoDir, startServer, tempDir, TOKEN, tokensFile, until } from "./helpers.js";

// kinds is each event's payload case, in order.
function kinds(events: Event[]): string[] {
  return events.map((e) => e.payload.case ?? "?");
}

// consecutive asserts that events are 1, 2, 3, … with none twice.
function assertConsecutive(events: Event[], from = 1n): void {
  events.forEach((e, i) => assert.equal(e.sequence, from + BigInt(i), `event ${i} has sequence ${e.sequence}`));
}

test("the refund example: start, watch, approve its proposal, to completion", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());

  const { run, created, requestId } = await c.startRun({ contract: refundContract() });
  assert.ok(created);
  assert.match(requestId, /^ts-/);
  assert.match(run.runId, /^run_/);

  const seen: Event[] = [];
  let approved = false;
  for await (const ev of c.watchRun(run.runId)) {
    seen.push(ev);
    if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) {
      const p = pendingProposal(await c.getRun(run.runId));
      assert.ok(p, "a run that needs approval has a proposal pending");
      assert.equal(p.tool, "refunds.create");
      await c.approve(run.runId, p, { reason: "duplicate charge confirmed" });
      approved = true;
    }
  }
  assert.ok(approved);
  assertConsecutive(seen);
  const k = kinds(seen);
  for (const want of ["runStarted", "approvalRequested", "approvalDecided", "writeCommitted"]) assert.ok(k.includes(want), `no ${want} in ${k}`);
  const last = seen.at(-1)!;
  assert.equal(last.payload.case, "statusChanged");
  const end = await c.getRun(run.runId);
  assert.equal(end.status, RunStatus.COMPLETED);
  assert.equal(end.version, last.sequence);

  // The same request ID is the same run, not a second one.
  const again = await c.startRun({ contract: refundContract(), requestId });
  assert.equal(again.run.runId, run.runId);
  assert.equal(again.created, false);

  // listRuns lists it.
  const listed = await c.listRuns({ statuses: [RunStatus.COMPLETED] });
  assert.ok(listed.runs.some((r) => r.runId === run.runId));

  // A watch from the middle yields the rest, and one from the head nothing.
  const rest: Event[] = [];
  for await (const ev of c.watchRun(run.runId, { fromSeq: 5 })) rest.push(ev);
  assertConsecutive(rest, 5n);
  assert.equal(rest.at(-1)!.sequence, last.sequence);
  const none: Event[] = [];
  for await (const ev of c.watchRun(run.runId, { afterSequence: last.sequence })) none.push(ev);
  assert.deepEqual(none, []);
});

test("refusals are typed errors carrying the server's code and message", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());

  // Not found: a read, a decision and a watch of a run that does not exist.
  await assert.rejects(c.getRun("run_nope"), (e: unknown) => {
    assert.ok(e instanceof NotFoundError);
    assert.equal(e.codeName, "NOT_FOUND");
    assert.match(e.rawMessage, /run_nope/);
    assert.equal(e.server, srv.address);
    return true;
  });
  await assert.rejects(c.cancel("run_nope"), NotFoundError);
  await assert.rejects(async () => {
    for await (const _ of c.watchRun("run_nope")) assert.fail("a missing run has no events");
  }, NotFoundError);

  // Invalid argument: a contract with no goal; the field is named.
  await assert.rejects(
    c.startRun({ contract: refundContract((task) => void (task["goal"] = "")) }),
    (e: unknown) => {
      assert.ok(e instanceof InvalidArgumentError);
      assert.ok(e.fieldViolations.some((v) => v.field.includes("goal")), JSON.stringify(e.fieldViolations));
      return true;
    },
  );

  // A run paused for approval: a wrong hash, input and steering are refused.
  const { run } = await c.startRun({ contract: refundContract() });
  let paused = await c.getRun(run.runId);
  for await (const ev of c.watchRun(run.runId)) {
    if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) break;
  }
  paused = await c.getRun(run.runId);
  const p = pendingProposal(paused)!;
  await assert.rejects(c.approve(run.runId, { proposalId: p.proposalId, hash: "0".repeat(64) }), FailedPreconditionError);
  await assert.rejects(c.input(run.runId, "an answer to no question"), FailedPreconditionError);
  await assert.rejects(c.steer(run.runId, "go on"), (e: unknown) => e instanceof FailedPreconditionError && /DecideApproval/.test(e.rawMessage));
  await assert.rejects(c.raiseBudget(run.runId, { addSteps: 1 }), FailedPreconditionError);

  // Out of range: a watch from beyond the run's head.
  await assert.rejects(async () => {
    for await (const _ of c.watchRun(run.runId, { afterSequence: paused.version + 10n })) assert.fail("nothing is beyond the head");
  }, OutOfRangeError);

  // Deny and end it; every decision on the ended run is a failed
  // precondition.
  const denied = await c.deny(run.runId, p, { reason: "not ours", endRun: true });
  assert.equal(denied.status, RunStatus.DENIED);
  await assert.rejects(c.cancel(run.runId, { reason: "too late" }), (e: unknown) => {
    assert.ok(e instanceof FailedPreconditionError);
    assert.equal(e.codeName, "FAILED_PRECONDITION");
    assert.ok(e.rawMessage.length > 0);
    return true;
  });
  await assert.rejects(c.approve(run.runId, p), FailedPreconditionError);

  // Conflict: importing a run that is already stored (AlreadyExists), with
  // the generated client and toReinError; the export is rein export's
  // (the line "rein-export 1", the RunExport, its 32-byte SHA-256).
  const file = execFileSync(reinBin, ["export", run.runId, "--server", srv.address], { env: { ...process.env, HOME: srv.dir, REIN_CONFIG: "" } });
  const magic = file.indexOf(0x0a) + 1;
  const exported = fromBinary(RunExportSchema, file.subarray(magic, file.length - 32));
  assert.equal(exported.runId, run.runId);
  await assert.rejects(
    c.runs.importRun({ export: exported }).catch((e: unknown) => Promise.reject(toReinError(e))),
    (e: unknown) => e instanceof ConflictError && e.codeName === "ALREADY_EXISTS",
  );
  // Its twin: the same export under a run and request ID not stored is
  // imported.
  exported.runId = "run_01M8ZZZZZZZZZZZZZZZZZZZZZZ";
  for (const ev of exported.events) {
    ev.runId = exported.runId;
    if (ev.payload.case === "runStarted") ev.payload.value.requestId = "ts-imported";
  }
  const imported = (await c.runs.importRun({ export: exported })).run!;
  assert.equal(imported.status, RunStatus.DENIED);
});

test("revise, steer, input and raiseBudget carry a run on", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());

  // Revise the refund's arguments: a new proposal, then approve it.
  const { run } = await c.startRun({ contract: refundContract() });
  for await (const ev of c.watchRun(run.runId)) {
    if (ev.payload.case === "approvalRequested") break;
  }
  const first = pendingProposal(await c.getRun(run.runId))!;
  const revised = await c.revise(run.runId, first, { invoice_id: "INV-42", amount: "1100.00", currency: "EUR", reason: "partial" });
  const second = pendingProposal(revised);
  assert.ok(second);
  assert.notEqual(second.proposalId, first.proposalId);
  assert.equal(second.arguments?.["amount"], "1100.00");
  // The superseded proposal can no longer be approved; the revision can.
  await assert.rejects(c.approve(run.runId, first), FailedPreconditionError);
  await c.approve(run.runId, second);
  let status = RunStatus.UNSPECIFIED;
  for await (const ev of c.watchRun(run.runId)) {
    if (ev.payload.case === "statusChanged") status = ev.payload.value.to;
  }
  assert.equal(status, RunStatus.COMPLETED);

  // A question, answered; a budget pause, raised.
  const asking = await c.startRun({
    contract: refundContract((task, script) => {
      task["budget"] = { max_steps: 1, on_exhausted: "BUDGET_ACTION_PAUSE" };
      script.splice(0, script.length, { decision: { ask_human: { question: "Which invoice?" } } }, { decision: { final_answer: { text: "done" } } });
    }),
  });
  const id = asking.run.runId;
  const statuses: RunStatus[] = [];
  for await (const ev of c.watchRun(id)) {
    if (ev.payload.case !== "statusChanged") continue;
    statuses.push(ev.payload.value.to);
    if (ev.payload.value.to === RunStatus.NEEDS_INPUT) {
      // Steering a paused run is refused, naming the call that answers it.
      await assert.rejects(c.steer(id, "hurry"), (e: unknown) => e instanceof FailedPreconditionError && /ProvideInput/.test(e.rawMessage));
      await c.input(id, "INV-42");
    }
    if (ev.payload.value.to === RunStatus.NEEDS_BUDGET) {
      // A raise that leaves the limit reached is refused; one that lifts it is not.
      await assert.rejects(c.raiseBudget(id, { addTokens: 10n }), FailedPreconditionError);
      await c.raiseBudget(id, { addSteps: 1, reason: "one more" });
    }
  }
  assert.deepEqual(statuses, [RunStatus.NEEDS_INPUT, RunStatus.RUNNING, RunStatus.NEEDS_BUDGET, RunStatus.RUNNING, RunStatus.COMPLETED]);
});

test("cancel ends a paused run; a second cancel is refused", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());
  const { run } = await c.startRun({ contract: refundContract() });
  for await (const ev of c.watchRun(run.runId)) {
    if (ev.payload.case === "approvalRequested") break;
  }
  const cancelled = await c.cancel(run.runId, { reason: "test over" });
  assert.equal(cancelled.status, RunStatus.CANCELLED);
  assert.equal(cancelled.statusReason, "test over");
  await assert.rejects(c.cancel(run.runId), FailedPreconditionError);
});

test("steer records a message to a running run once per request ID; an ended run refuses it", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());
  // The model's first call takes a while, so that the run is running when
  // it is steered.
  const { run } = await c.startRun({ contract: refundContract((_, script) => void (script[0]!["delay_ms"] = 1500)) });
  const first = await c.steer(run.runId, "the customer is Acme Ltd", { requestId: "steer-1" });
  assert.equal(first.created, true);
  const again = await c.steer(run.runId, "the customer is Acme Ltd", { requestId: "steer-1" });
  assert.equal(again.created, false);
  let steered = 0;
  for await (const ev of c.watchRun(run.runId)) {
    if (ev.payload.case === "runSteered") steered++;
    if (ev.payload.case === "approvalRequested") break;
  }
  assert.equal(steered, 1);
  await c.cancel(run.runId);
  await assert.rejects(c.steer(run.runId, "too late"), FailedPreconditionError);
});

test("examples/refund.ts runs the refund example to completion, with tokens as an operator and an approver; refused, it says so on one line", async (t) => {
  const example = join(pkgDir, "dist/examples/refund.js");
  const srv = await startServer(t);
  const out = await runNode(example, { REIN_SERVER: srv.address, REIN_TOKEN: "" });
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stdout, /approvalRequested/);
  assert.match(out.stdout, /COMPLETED: Refunded the duplicate charge/);

  // With tokens: olga may only operate, alice only approve.
  const sha = (s: string) => createHash("sha256").update(s).digest("hex");
  const extra = [
    { id: "olga", tenant: "ts", roles: ["operator"], token_sha256: sha("olga-token") },
    { id: "alice", tenant: "ts", roles: ["approver"], token_sha256: sha("alice-token") },
  ];
  const guarded = await startServer(t, { args: ["--tokens", tokensFile(tempDir(t), extra)] });
  const both = await runNode(example, { REIN_SERVER: guarded.address, REIN_TOKEN: "olga-token", REIN_APPROVER_TOKEN: "alice-token" });
  assert.equal(both.code, 0, both.stderr);
  assert.match(both.stdout, /refunds\.create would write \{"/, "the preview prints as plain JSON");
  assert.match(both.stdout, /COMPLETED: Refunded the duplicate charge/);

  // Refused: one line saying what to set, no stack trace.
  const cases = [
    { env: { REIN_TOKEN: "" }, want: /^refund: starting the run \(as REIN_TOKEN, an operator\) was refused: UNAUTHENTICATED: .*; set REIN_TOKEN/ },
    { env: { REIN_TOKEN: "olga-token", REIN_APPROVER_TOKEN: "" }, want: /^refund: approving its write \(as REIN_APPROVER_TOKEN, an approver\) was refused: PERMISSION_DENIED: .*REIN_APPROVER_TOKEN/ },
  ];
  for (const c of cases) {
    const refused = await runNode(example, { REIN_SERVER: guarded.address, ...c.env });
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(refused.stderr.trim().split("\n").length, 1, `one line, no stack trace:\n${refused.stderr}`);
    assert.match(refused.stderr, c.want);
  }
});

// approvers starts a server whose tokens file has two more approvers, alice
// and bob, and a run as TOKEN's operator of the refund example with its
// write needing n approvals, paused on it; it returns a client for each
// approver, the run's ID and its proposal.
async function approvers(t: Parameters<typeof startServer>[0], n: number) {
  const sha = (s: string) => createHash("sha256").update(s).digest("hex");
  const extra = ["alice", "bob"].map((id) => ({ id, tenant: "ts", roles: ["approver"], token_sha256: sha(`${id}-token`) }));
  const srv = await startServer(t, { args: ["--tokens", tokensFile(tempDir(t), extra)] });
  const client = (token: string) => {
    const c = connect({ servers: [srv.address], token });
    t.after(() => c.close());
    return c;
  };
  const starter = client(TOKEN);
  const contract = refundContract((task) => {
    for (const g of task["tools"] as JsonObject[]) if (g["name"] === "refunds.create") g["approvals"] = n;
  });
  const { run } = await starter.startRun({ contract });
  for await (const ev of starter.watchRun(run.runId)) {
    if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) break;
  }
  const proposal = pendingProposal(await starter.getRun(run.runId));
  assert.ok(proposal, "a run that needs approval has a proposal pending");
  return { starter, alice: client("alice-token"), bob: client("bob-token"), runId: run.runId, proposal };
}

test("a write that needs two approvers: the first approval answers a run that still waits for a person", async (t) => {
  const { starter, alice, bob, runId, proposal } = await approvers(t, 2);
  assert.ok(waitsForPerson(await starter.getRun(runId)));
  assert.equal(approvalsWanted(await starter.getRun(runId)), 2);

  const first = await alice.approve(runId, proposal, { reason: "checked" });
  assert.ok(waitsForPerson(first), "after the first of two approvals the run waits for another approver");
  assert.equal(approvalsWanted(first), 1);
  assert.deepEqual(pendingProposal(first)?.approvedBy, ["alice"]);

  const second = await bob.approve(runId, proposal, { reason: "checked too" });
  assert.ok(!waitsForPerson(second), `after the second approval the run goes on (${RunStatus[second.status]})`);
  assert.equal(approvalsWanted(second), 0);
  for await (const _ of starter.watchRun(runId)); // to its end
  assert.equal((await starter.getRun(runId)).status, RunStatus.COMPLETED);
});

test("a write that needs one approver: its approval answers a run that goes on", async (t) => {
  const { alice, runId, proposal } = await approvers(t, 1);
  const answer = await alice.approve(runId, proposal, { reason: "checked" });
  assert.ok(!waitsForPerson(answer), `after the approval the run goes on (${RunStatus[answer.status]})`);
});

test("aborting a watch ends it as Canceled, with no reconnection", async (t) => {
  const srv = await startServer(t);
  const reconnects: unknown[] = [];
  const c = connect({ servers: [srv.address], onReconnect: (e) => void reconnects.push(e) });
  t.after(() => c.close());
  const { run } = await c.startRun({ contract: refundContract() });
  const ac = new AbortController();
  const seen: Event[] = [];
  await assert.rejects(async () => {
    for await (const ev of c.watchRun(run.runId, { signal: ac.signal })) {
      seen.push(ev);
      // A paused run keeps its watch open: only the abort ends it.
      if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) ac.abort();
    }
  }, (e: unknown) => e instanceof ReinError && e.codeName === "CANCELLED");
  assert.deepEqual(reconnects, []);
  assert.equal(seen.at(-1)?.payload.case, "statusChanged");
});

// runNode runs a script with node from the repository root and resolves
// with its exit code and output.
function runNode(script: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((res, rej) => {
    execFile(process.execPath, [script], { cwd: repoDir, env: { ...process.env, ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") return rej(err);
      res({ code: err ? (err.code as number) : 0, stdout, stderr });
    });
  });
}

// pauseContract is the refund example with its budget's timeout and its
// approval's proposal TTL set.
function pauseContract(timeout: string, ttl: string) {
  return refundContract((task) => {
    (task["budget"] as JsonObject)["timeout"] = timeout;
    task["approval"] = { proposal_ttl: ttl };
  });
}

test("pauseEnds: a proposal TTL that outlives the run's deadline ends at the deadline, and startRun warns", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());
  const { run, warnings } = await c.startRun({ contract: pauseContract("120s", "3600s") });
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /proposal_ttl \(1h0m0s\) outlives contract\.budget\.timeout \(2m0s\)/);
  await until("the run pauses", async () => waitsForPerson(await c.getRun(run.runId)));
  const paused = await c.getRun(run.runId);
  const end = pauseEnds(paused);
  assert.ok(end && paused.deadline);
  assert.equal(end.by, "run_deadline");
  assert.equal(end.at.getTime(), timestampDate(paused.deadline).getTime());
});

test("pauseEnds: a proposal TTL shorter than the run's deadline ends when the proposal expires, with no warning", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());
  const { run, warnings } = await c.startRun({ contract: pauseContract("3600s", "600s") });
  assert.deepEqual(warnings, []);
  await until("the run pauses", async () => waitsForPerson(await c.getRun(run.runId)));
  const paused = await c.getRun(run.runId);
  const end = pauseEnds(paused);
  const p = pendingProposal(paused);
  assert.ok(end && p?.expiresAt);
  assert.equal(end.by, "proposal_ttl");
  assert.equal(end.at.getTime(), timestampDate(p.expiresAt).getTime());
  assert.equal(pauseEnds(await c.cancel(run.runId)), undefined);
});
