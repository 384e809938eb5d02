// rein's A2A face tested with the official A2A JavaScript SDK's client
// (@a2a-js/sdk, pinned in package-lock.json; it speaks A2A v1.0's method
// names): a real `rein serve --http … --http-a2a --tokens` (REIN_BIN)
// runs the refund example as a catalog task. The client reads the card,
// streams a refund to its approval, approves it with the proposal's hash
// (a data part) and sees it complete with its artifact; cancels another;
// and a principal without the approver role cannot approve.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createHash, randomUUID } from "node:crypto";
import net from "node:net";
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { Role, TaskState } from "@a2a-js/sdk";

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

const sha256 = (s) => createHash("sha256").update(s).digest("hex");

before(async () => {
  assert.ok(bin, "set REIN_BIN to the rein binary");
  dir = mkdtempSync(join(tmpdir(), "rein-a2a-"));
  const task = JSON.parse(readFileSync(join(root, "examples/refund/task.json"), "utf8"));
  delete task.inputs;
  task.name = "refund";
  task.input_schema = { type: "object", properties: { invoice_id: { type: "string" } }, required: ["invoice_id"] };
  task.model = {
    provider: "script",
    script: readFileSync(join(root, "examples/refund/model.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l)),
  };
  mkdirSync(join(dir, "tasks"));
  writeFileSync(join(dir, "tasks", "refund.json"), JSON.stringify(task));
  writeFileSync(join(dir, "tokens.json"), JSON.stringify({ principals: [
    { id: "boss", tenant: "acme", roles: ["operator", "approver"], token_sha256: sha256("boss-token") },
    { id: "clerk", tenant: "acme", roles: ["operator"], token_sha256: sha256("clerk-token") },
  ] }));
  const [grpc, web] = [await freePort(), await freePort()];
  base = `http://127.0.0.1:${web}`;
  server = spawn(bin, ["serve", "--db", join(dir, "rein.db"), "--listen", `127.0.0.1:${grpc}`, "--http", `127.0.0.1:${web}`, "--http-a2a",
    "--tokens", join(dir, "tokens.json"), "--tasks", join(dir, "tasks"), "--tools", `fixture:${join(root, "examples/refund/tools.json")}`, "--rate", "0"],
  { stdio: ["ignore", "ignore", "pipe"] });
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

// methods are the JSON-RPC methods the SDK's clients have called.
const methods = new Set();

// clientAs is the SDK's client, made from rein's card, whose every call
// carries who's bearer token.
async function clientAs(who) {
  const fetchImpl = (url, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set("Authorization", `Bearer ${who}-token`);
    if (typeof init.body === "string") methods.add(JSON.parse(init.body).method);
    return fetch(url, { ...init, headers });
  };
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
  }));
  return factory.createFromUrl(base);
}

const dataPart = (value) => ({ content: { $case: "data", value }, metadata: undefined, filename: "", mediaType: "" });

function userMessage(parts, fields = {}) {
  return { messageId: randomUUID(), contextId: "", taskId: "", role: Role.ROLE_USER, parts, metadata: undefined, extensions: [], referenceTaskIds: [], ...fields };
}

function refundRequest() {
  return { tenant: "", message: userMessage([dataPart({ invoice_id: "INV-42" })], { metadata: { skill: "refund" } }), configuration: undefined, metadata: undefined };
}

// follow reads a stream to its end: the task it opened with and every
// status and artifact update.
async function follow(events) {
  const out = { task: undefined, updates: [] };
  for await (const ev of events) {
    const p = ev.payload;
    if (p?.$case === "task") out.task = p.value;
    else if (p?.$case === "statusUpdate" || p?.$case === "artifactUpdate") out.updates.push(p);
  }
  return out;
}

const lastStatus = (s) => [...s.updates].reverse().find((u) => u.$case === "statusUpdate")?.value.status;

// approvalOf is the approval data part of an input-required status.
function approvalOf(status) {
  const part = status?.message?.parts.find((p) => p.content?.$case === "data" && p.content.value?.kind === "approval");
  assert.ok(part, `no approval in ${JSON.stringify(status)}`);
  return part.content.value;
}

test("the card names the refund skill, its input schema and bearer", async () => {
  const client = await clientAs("boss");
  const card = await client.getAgentCard();
  assert.deepEqual(card.skills.map((s) => s.id), ["refund"]);
  assert.ok(card.securitySchemes.bearer, "bearer is the card's security scheme");
});

test("a refund streams to its approval, is approved with the hash, completes with its artifact", async () => {
  const client = await clientAs("boss");
  const s = await follow(client.sendMessageStream(refundRequest()));
  assert.ok(s.task?.id, "the stream opens with the task");
  const paused = lastStatus(s);
  assert.equal(paused.state, TaskState.TASK_STATE_INPUT_REQUIRED);
  const proposal = approvalOf(paused);
  assert.equal(proposal.tool, "refunds.create");

  // Free text never approves a write.
  await assert.rejects(client.sendMessage({ tenant: "", configuration: undefined, metadata: undefined,
    message: userMessage([{ content: { $case: "text", value: "yes, approve" }, metadata: undefined, filename: "", mediaType: "" }],
      { taskId: s.task.id, contextId: s.task.contextId }) }), /decision/);

  const reply = userMessage([dataPart({ decision: "approve", proposal_hash: proposal.hash })], { taskId: s.task.id, contextId: s.task.contextId });
  const done = await follow(client.sendMessageStream({ tenant: "", message: reply, configuration: undefined, metadata: undefined }));
  assert.equal(lastStatus(done).state, TaskState.TASK_STATE_COMPLETED);
  const art = done.updates.find((u) => u.$case === "artifactUpdate")?.value.artifact;
  assert.equal(art?.artifactId, "result");
  assert.match(art.parts[0].content.value, /Refunded the duplicate charge/);

  const task = await client.getTask({ tenant: "", id: s.task.id });
  assert.equal(task.status.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(task.artifacts[0].artifactId, "result");
  for (const m of ["SendStreamingMessage", "SendMessage", "GetTask"]) assert.ok(methods.has(m), `the SDK called ${[...methods]}, not A2A v1.0's ${m}`);
});

test("a task is cancelled; an ended one cannot be", async () => {
  const client = await clientAs("boss");
  const s = await follow(client.sendMessageStream(refundRequest()));
  const cancelled = await client.cancelTask({ tenant: "", id: s.task.id, metadata: undefined });
  assert.equal(cancelled.status.state, TaskState.TASK_STATE_CANCELED);
  await assert.rejects(client.cancelTask({ tenant: "", id: s.task.id, metadata: undefined }), /nothing to cancel/);
});

test("a principal without the approver role cannot approve; nothing changes", async () => {
  const boss = await clientAs("boss");
  const clerk = await clientAs("clerk");
  const s = await follow(clerk.sendMessageStream(refundRequest()));
  const proposal = approvalOf(lastStatus(s));
  const reply = userMessage([dataPart({ decision: "approve", proposal_hash: proposal.hash })], { taskId: s.task.id, contextId: s.task.contextId });
  await assert.rejects(clerk.sendMessage({ tenant: "", message: reply, configuration: undefined, metadata: undefined }), /permission|approver|role/i);
  const task = await boss.getTask({ tenant: "", id: s.task.id });
  assert.equal(task.status.state, TaskState.TASK_STATE_INPUT_REQUIRED, "the refused approval changed the task");
  assert.equal(approvalOf(task.status).hash, proposal.hash);
  await boss.cancelTask({ tenant: "", id: s.task.id, metadata: undefined });
});
