// The tests' rein: a real `rein serve --http … --http-mcp` process (or
// `rein mcp` over stdio) with the refund example as a catalog task (its
// scripted model inline, offline and deterministic), its fixture tools,
// and principals from a tokens file; and clients of the official
// TypeScript SDK (@modelcontextprotocol/sdk) that connect to it.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

export const repoDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

// The rein binary: REIN_BIN, else the checkout's .bin/rein.
export const reinBin = process.env.REIN_BIN ? resolve(process.env.REIN_BIN) : join(repoDir, ".bin/rein");

export const refundTools = join(repoDir, "examples/refund/tools.json");

// The principals of the tokens file, by ID; a token is the ID + "-token".
export const principals = {
  starter: ["operator", "approver"], // starts, and may approve its own write (the contract allows it)
  operator: ["operator"], // starts, may not approve
  approver: ["approver"],
};

export const token = (who) => `${who}-token`;

// tempDir is a new directory, removed with the test.
export function tempDir(t) {
  const d = mkdtempSync(join(tmpdir(), "rein-mcp-"));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

// refundTask is examples/refund as a catalog task: its contract without
// the inputs, its scripted model inline, a name and an input schema.
export function refundTask() {
  const task = JSON.parse(readFileSync(join(repoDir, "examples/refund/task.json"), "utf8"));
  const script = readFileSync(join(repoDir, "examples/refund/model.jsonl"), "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l));
  delete task.inputs;
  return {
    ...task,
    name: "refund",
    description: "Refund a duplicate charge on an invoice.",
    input_schema: {
      type: "object",
      properties: { invoice_id: { type: "string", pattern: "^INV-[0-9]+$" } },
      required: ["invoice_id"],
      additionalProperties: false,
    },
    model: { provider: "script", script },
  };
}

// fixtures writes the tasks directory and the tokens file into dir.
export function fixtures(dir) {
  const tasks = join(dir, "tasks");
  mkdirSync(tasks);
  writeFileSync(join(tasks, "refund.json"), JSON.stringify(refundTask()));
  const sha = (s) => createHash("sha256").update(s).digest("hex");
  const tokens = join(dir, "tokens.json");
  writeFileSync(
    tokens,
    JSON.stringify({
      principals: Object.entries(principals).map(([id, roles]) => ({ id, tenant: "acme", roles, token_sha256: sha(token(id)) })),
    }),
  );
  return { tasks, tokens };
}

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => res(a.port));
    });
  });
}

// startServer starts rein serve with the MCP face on its HTTP face and
// resolves, once it serves, with the face's URL. The test stops it.
export async function startServer(t) {
  const dir = tempDir(t);
  const { tasks, tokens } = fixtures(dir);
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const proc = spawn(
    reinBin,
    [
      "serve",
      "--listen", `127.0.0.1:${grpcPort}`,
      "--http", `127.0.0.1:${httpPort}`,
      "--http-mcp",
      "--db", join(dir, "rein.db"),
      "--tokens", tokens,
      "--tasks", tasks,
      "--tools", `fixture:${refundTools}`,
      "--reflection=false",
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  const exited = new Promise((res) => proc.once("exit", res));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await exited;
  });
  await new Promise((res, rej) => {
    proc.stderr.on("data", (b) => {
      log += b.toString();
      if (/msg="rein serving"/.test(log)) res();
    });
    proc.once("error", rej);
    proc.once("exit", (code, sig) => rej(new Error(`rein serve exited (${code ?? sig}) before serving:\n${log}`)));
  });
  return { url: new URL(`http://127.0.0.1:${httpPort}/mcp`), log: () => log };
}

// Session is a connected SDK client, the elicitations it was sent, and
// the log messages the server sent it.
//   elicit: "accept", "decline", "cancel", or undefined for a client that
//   does not declare the elicitation capability.
export async function connect(t, transport, elicit) {
  const client = new Client({ name: "rein-mcp-test", version: "1.0.0" }, { capabilities: elicit ? { elicitation: {} } : {} });
  const session = { client, elicitations: [], logs: [] };
  if (elicit) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      session.elicitations.push(req.params);
      if (elicit === "accept") return { action: "accept", content: { reason: "looks right" } };
      if (elicit === "decline") return { action: "decline" };
      return { action: "cancel" };
    });
  }
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    session.logs.push(n.params);
  });
  await client.connect(transport);
  t.after(() => client.close());
  // The server sends log messages only to a client that set a level.
  await client.setLoggingLevel("info");
  return session;
}

// connectHTTP opens a session with the face as who.
export function connectHTTP(t, server, who, elicit) {
  const transport = new StreamableHTTPClientTransport(server.url, {
    requestInit: { headers: { Authorization: `Bearer ${token(who)}` } },
  });
  return connect(t, transport, elicit);
}

// call calls a tool and returns its text parsed as JSON; a tool error
// throws with its text.
export async function call(session, name, args) {
  const res = await session.client.callTool({ name, arguments: args });
  const text = res.content.map((c) => c.text ?? "").join("");
  if (res.isError) throw new Error(`${name}: ${text}`);
  return JSON.parse(text);
}

// until polls cond every 25 ms until it holds (and returns what it
// returned), or fails after ms with what.
export async function until(what, cond, ms = 30_000) {
  const end = Date.now() + ms;
  for (;;) {
    const got = await cond();
    if (got) return got;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

// waitStatus polls get_run until the run is in status.
export function waitStatus(session, runId, status) {
  return until(`run ${runId} in ${status}`, async () => {
    const got = await call(session, "get_run", { run_id: runId });
    return got.run.status === status ? got.run : undefined;
  });
}

// events is a run's events (its first page, which holds a refund's).
export async function events(session, runId) {
  return (await call(session, "get_events", { run_id: runId, page_size: 100 })).events ?? [];
}
