// rein's MCP face driven by a client no one here wrote: the official
// TypeScript SDK's, over Streamable HTTP against a real `rein serve
// --http-mcp` process, and over stdio against `rein mcp` launched as a
// subprocess. Nothing sleeps to wait: the tests poll with deadlines.
import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";

import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

import { call, connect, connectHTTP, events, fixtures, refundTools, reinBin, startServer, tempDir, until, waitStatus } from "./helpers.mjs";

const committed = (evs) => evs.filter((e) => e.write_committed !== undefined).length;
const decisions = (evs) => evs.filter((e) => e.approval_decided !== undefined);

// start starts the refund task and checks that it paused for its write.
async function start(session) {
  const started = await call(session, "start_refund", { invoice_id: "INV-42" });
  assert.equal(started.status, "RUN_STATUS_NEEDS_APPROVAL", JSON.stringify(started));
  assert.ok(started.pending?.proposal?.hash, `no proposal hash in ${JSON.stringify(started)}`);
  return started;
}

function elicited(session) {
  return until("the approval's elicitation", () => session.elicitations[0]);
}

test("the tools a principal is offered, with truthful annotations", async (t) => {
  const server = await startServer(t);
  const starter = await connectHTTP(t, server, "starter");
  const { tools } = await starter.client.listTools();
  const names = tools.map((x) => x.name).sort();
  for (const want of ["approve", "deny", "get_events", "get_run", "list_pending", "list_runs", "start_refund"]) {
    assert.ok(names.includes(want), `${want} is not among ${names}`);
  }
  for (const tool of tools) {
    const read = tool.name.startsWith("get_") || tool.name.startsWith("list_");
    assert.equal(tool.annotations?.readOnlyHint, read, `${tool.name}: readOnlyHint ${tool.annotations?.readOnlyHint}`);
  }
  const refund = tools.find((x) => x.name === "start_refund");
  assert.deepEqual(refund.inputSchema.required, ["invoice_id"]);
  // The twin: an operator without the approver role is not offered the
  // decisions.
  const operator = await connectHTTP(t, server, "operator");
  const offered = (await operator.client.listTools()).tools.map((x) => x.name);
  assert.ok(offered.includes("start_refund") && !offered.includes("approve") && !offered.includes("deny"), `${offered}`);
});

test("arguments that break the task's schema are a tool error naming the field, and start nothing", async (t) => {
  const server = await startServer(t);
  const starter = await connectHTTP(t, server, "starter");
  await assert.rejects(call(starter, "start_refund", { invoice_id: "42" }), /InvalidArgument: inputs\.invoice_id/);
  await assert.rejects(call(starter, "start_refund", {}), /InvalidArgument: inputs\.invoice_id: required/);
  const runs = await call(starter, "list_runs", {});
  assert.equal((runs.runs ?? []).length, 0, JSON.stringify(runs));
});

test("accepting the approval's elicitation approves the write: the run completes, committed once", async (t) => {
  const server = await startServer(t);
  const starter = await connectHTTP(t, server, "starter", "accept");
  const started = await start(starter);
  const asked = await elicited(starter);
  for (const want of ["refunds.create", "INV-42", started.pending.proposal.proposal_id, started.pending.proposal.hash]) {
    assert.ok(asked.message.includes(want), `the elicitation does not show ${want}:\n${asked.message}`);
  }
  assert.equal(asked.requestedSchema.type, "object");
  const run = await waitStatus(starter, started.run_id, "RUN_STATUS_COMPLETED");
  assert.match(JSON.stringify(run.result), /Refunded/);
  const evs = await events(starter, started.run_id);
  assert.equal(committed(evs), 1, "the write was not committed exactly once");
  const [decided] = decisions(evs);
  assert.equal(decided.actor, "principal:starter");
  assert.equal(decided.approval_decided.approved, true);
  assert.equal(starter.elicitations.length, 1, "the proposal was asked more than once");
});

test("declining the elicitation denies the write: nothing is committed", async (t) => {
  const server = await startServer(t);
  const starter = await connectHTTP(t, server, "starter", "decline");
  const started = await start(starter);
  await elicited(starter);
  // The denial goes to the model as an observation; its script then ends.
  await waitStatus(starter, started.run_id, "RUN_STATUS_COMPLETED");
  const evs = await events(starter, started.run_id);
  assert.equal(committed(evs), 0, "a declined write was committed");
  const [decided] = decisions(evs);
  assert.equal(decided.actor, "principal:starter");
  assert.notEqual(decided.approval_decided.approved, true);
  assert.equal(decided.approval_decided.reason, "declined through MCP elicitation");
});

test("a principal without the approver role cannot approve, by elicitation or by tool", async (t) => {
  const server = await startServer(t);
  const operator = await connectHTTP(t, server, "operator", "accept");
  const started = await start(operator);
  await elicited(operator);
  // The accept was refused by the API, and the session is told why.
  const warned = await until("the refusal's log message", () => operator.logs.find((l) => /refused/.test(String(l.data))));
  assert.match(String(warned.data), /PermissionDenied|approver/);
  const proposal = started.pending.proposal;
  const approveArgs = { run_id: started.run_id, proposal_id: proposal.proposal_id, proposal_hash: proposal.hash };
  // approve is not among its tools, and a call of it is refused.
  await assert.rejects(operator.client.callTool({ name: "approve", arguments: approveArgs }), /unknown tool "approve"/);
  const pending = await call(operator, "list_pending", {});
  assert.ok((pending.runs ?? []).some((r) => r.run_id === started.run_id), JSON.stringify(pending));
  assert.equal(committed(await events(operator, started.run_id)), 0, "a write was committed");
  // The twin: an approver decides it, through the tool.
  const approver = await connectHTTP(t, server, "approver");
  await call(approver, "approve", approveArgs);
  await waitStatus(operator, started.run_id, "RUN_STATUS_COMPLETED");
  assert.equal(committed(await events(operator, started.run_id)), 1);
});

test("rein mcp --db, launched over stdio by the SDK, runs the task and takes the approval", async (t) => {
  const dir = tempDir(t);
  const { tasks } = fixtures(dir);
  let stderr = "";
  const transport = new StdioClientTransport({
    command: reinBin,
    args: ["mcp", "--db", join(dir, "rein.db"), "--tasks", tasks, "--tools", `fixture:${refundTools}`],
    stderr: "pipe",
  });
  transport.stderr?.on("data", (b) => (stderr += b.toString()));
  const session = await connect(t, transport, "accept");
  const { tools } = await session.client.listTools();
  assert.ok(tools.some((x) => x.name === "start_refund"), `no start_refund among ${tools.map((x) => x.name)}\n${stderr}`);
  const started = await start(session);
  await elicited(session);
  await waitStatus(session, started.run_id, "RUN_STATUS_COMPLETED");
  assert.equal(committed(await events(session, started.run_id)), 1, stderr);
});
