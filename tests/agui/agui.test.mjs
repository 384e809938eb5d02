// rein's AG-UI face tested with AG-UI's own client package: a real
// `rein serve --http … --http-agui` (REIN_BIN) runs the refund example as
// a catalog task; HttpAgent runs it to its approval and on to the end, and
// every event validates against @ag-ui/core's schemas; a stream cut
// mid-run resumes with the last id it saw and loses and repeats nothing.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import net from "node:net";
import { HttpAgent } from "@ag-ui/client";
import { EventType } from "@ag-ui/core";
import { EventSchemas } from "@ag-ui/core/schemas";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const bin = process.env.REIN_BIN;
let server, base, dir;

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

before(async () => {
  assert.ok(bin, "set REIN_BIN to the rein binary");
  dir = mkdtempSync(join(tmpdir(), "rein-agui-"));
  const task = JSON.parse(readFileSync(join(root, "examples/refund/task.json"), "utf8"));
  delete task.inputs;
  task.name = "refund";
  task.input_schema = { type: "object", properties: { invoice_id: { type: "string" } }, required: ["invoice_id"] };
  task.model = {
    provider: "script",
    script: readFileSync(join(root, "examples/refund/model.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l)),
  };
  writeFileSync(join(dir, "refund.json"), JSON.stringify(task));
  const [grpc, web] = [await freePort(), await freePort()];
  base = `http://127.0.0.1:${web}`;
  server = spawn(bin, ["serve", "--db", join(dir, "rein.db"), "--listen", `127.0.0.1:${grpc}`, "--http", `127.0.0.1:${web}`, "--http-agui",
    "--tasks", dir, "--tools", `fixture:${join(root, "examples/refund/tools.json")}`, "--rate", "0"], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  await new Promise((resolve, reject) => {
    server.stderr.on("data", (b) => { log += b; if (log.includes("serving the web console")) resolve(); });
    server.once("exit", (code) => reject(new Error(`rein serve exited ${code}:\n${log}`)));
  });
});

after(() => {
  server?.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// approve approves a proposal through RunService's Connect face, as the
// console does.
async function approve(v) {
  const resp = await fetch(`${base}/rein.v1.RunService/DecideApproval`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Connect-Protocol-Version": "1" },
    body: JSON.stringify({ runId: v.runId, proposalId: v.proposalId, proposalHash: v.hash, verdict: "APPROVAL_VERDICT_APPROVE" }),
  });
  assert.equal(resp.status, 200, await resp.text());
}

// sse reads an SSE response's messages: {id, event}, the event checked
// against AG-UI's schemas. stop ends the read early.
async function* sse(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let id = "", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("id: ")) id = line.slice(4);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (!data) continue;
      const event = EventSchemas.parse(JSON.parse(data)); // throws on an event off AG-UI's schema
      yield { id, event };
    }
  }
}

test("HttpAgent runs the refund task to its approval, then to RUN_FINISHED", async () => {
  const agent = new HttpAgent({ url: `${base}/agui/tasks/refund`, threadId: "thread-1", initialState: { invoice_id: "INV-42" } });
  const seen = [];
  let approval;
  await agent.runAgent({ runId: "client-run-1" }, {
    onEvent: ({ event }) => { seen.push(event.type); },
    onCustomEvent: async ({ event }) => {
      if (event.name === "rein.approval_requested") {
        approval = event.value;
        await approve(event.value);
      }
    },
  });
  assert.ok(approval, "no rein.approval_requested");
  assert.equal(approval.tool, "refunds.create");
  for (const t of [EventType.RUN_STARTED, EventType.STATE_SNAPSHOT, EventType.STATE_DELTA, EventType.STEP_STARTED, EventType.STEP_FINISHED,
    EventType.TOOL_CALL_START, EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END, EventType.TOOL_CALL_RESULT,
    EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END, EventType.CUSTOM, EventType.RUN_FINISHED]) {
    assert.ok(seen.includes(t), `no ${t} in ${seen.join(" ")}`);
  }
  assert.equal(seen.at(-1), EventType.RUN_FINISHED);
  // The agent's state is the run as rein has it; its messages hold the answer.
  assert.equal(agent.state.status, "RUN_STATUS_COMPLETED");
  assert.ok(agent.messages.some((m) => m.role === "assistant" && String(m.content).includes("Refunded the duplicate charge")), JSON.stringify(agent.messages));
});

test("a stream cut mid-run resumes with the last id it saw: every message once", async () => {
  const body = { threadId: "thread-2", runId: "client-run-2", state: { invoice_id: "INV-42" }, messages: [], tools: [], context: [] };
  const ctl = new AbortController();
  const resp = await fetch(`${base}/agui/tasks/refund`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal: ctl.signal });
  assert.equal(resp.status, 200);
  const first = [];
  let approval;
  for await (const m of sse(resp)) {
    first.push(m);
    if (m.event.type === EventType.CUSTOM && m.event.name === "rein.approval_requested") { approval = m.event.value; break; }
  }
  ctl.abort(); // the cut
  await approve(approval);
  const lastId = first.filter((m) => m.id).at(-1).id;
  const resumed = [];
  for await (const m of sse(await fetch(`${base}/agui/runs/${approval.runId}`, { headers: { "Last-Event-ID": lastId } }))) resumed.push(m);
  assert.equal(resumed[0].event.type, EventType.RUN_STARTED);
  assert.equal(resumed.at(-1).event.type, EventType.RUN_FINISHED);

  const whole = [];
  for await (const m of sse(await fetch(`${base}/agui/runs/${approval.runId}?after=0`))) whole.push(m);
  const ids = (ms) => ms.filter((m) => m.id).map((m) => m.id);
  assert.deepEqual([...ids(first), ...ids(resumed)], ids(whole));
  // And the sequenced events themselves, not only their ids.
  const sequenced = (ms) => ms.filter((m) => m.id).map((m) => JSON.stringify(m.event));
  assert.deepEqual([...sequenced(first), ...sequenced(resumed)], sequenced(whole));
});

test("refusals: a bad after is 400, a run that does not exist 404", async () => {
  assert.equal((await fetch(`${base}/agui/runs/run_nope`)).status, 404);
  const r = await fetch(`${base}/agui/runs/run_nope?after=-1`);
  assert.equal(r.status, 400);
});
