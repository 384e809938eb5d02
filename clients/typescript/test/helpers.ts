// The tests' real rein servers: `rein serve` started on a free port with a
// temporary data directory, the refund example's fixture tools and its
// scripted model (offline, deterministic).
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fromJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";

import { TaskContractSchema, type TaskContract } from "../src/index.js";

// The package's directory (this file runs from dist/test/).
export const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const repoDir = resolve(pkgDir, "../..");

// The rein binary: REIN_BIN (relative to the working directory), else
// ../../.bin/rein from the package.
export const reinBin = process.env.REIN_BIN ? resolve(process.env.REIN_BIN) : resolve(pkgDir, "../../.bin/rein");

export const refundTools = join(repoDir, "examples/refund/tools.json");

// The tokens the tests' tokens file lists: an operator who may also
// approve, and a viewer.
export const TOKEN = "ts-client-test-token";
export const VIEWER_TOKEN = "ts-client-viewer-token";

// tempDir is a new directory, removed with the test.
export function tempDir(t: { after: (fn: () => void) => void }): string {
  const d = mkdtempSync(join(tmpdir(), "rein-ts-"));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

// tokensFile writes a tokens file of TOKEN (operator, approver) and
// VIEWER_TOKEN (viewer), plus any principals given, into dir.
export function tokensFile(dir: string, extra: object[] = []): string {
  const sha = (s: string) => createHash("sha256").update(s).digest("hex");
  const path = join(dir, "tokens.json");
  writeFileSync(
    path,
    JSON.stringify({
      principals: [
        { id: "ts-operator", tenant: "ts", roles: ["operator", "approver"], token_sha256: sha(TOKEN) },
        { id: "ts-viewer", tenant: "ts", roles: ["viewer"], token_sha256: sha(VIEWER_TOKEN) },
        ...extra,
      ],
    }),
  );
  return path;
}

// freePort is a TCP port nothing listens on now.
export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? res(a.port) : rej(new Error("no port"))));
    });
  });
}

export interface ServerOptions {
  port?: number;
  // The data directory; a new temporary one when unset.
  dir?: string;
  // Extra flags of rein serve.
  args?: string[];
}

export interface Server {
  address: string;
  port: number;
  dir: string;
  proc: ChildProcess;
  // Everything the server wrote to stderr so far.
  log(): string;
  // Sends sig and resolves once the process has exited.
  kill(sig?: NodeJS.Signals): Promise<void>;
}

// startServer starts rein serve and resolves once it logs that it serves
// (or rejects with its log if it exits first). The test stops it.
export async function startServer(t: { after: (fn: () => Promise<void> | void) => void }, o: ServerOptions = {}): Promise<Server> {
  const port = o.port ?? (await freePort());
  const dir = o.dir ?? tempDir(t);
  const address = `127.0.0.1:${port}`;
  const proc = spawn(
    reinBin,
    ["serve", "--listen", address, "--db", join(dir, "rein.db"), "--tools", `fixture:${refundTools}`, "--reflection=false", ...(o.args ?? [])],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  const exited = new Promise<void>((res) => proc.once("exit", () => res()));
  const server: Server = {
    address,
    port,
    dir,
    proc,
    log: () => log,
    async kill(sig: NodeJS.Signals = "SIGKILL") {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
      await exited;
    },
  };
  t.after(() => server.kill());
  await new Promise<void>((res, rej) => {
    const onData = (b: Buffer) => {
      log += b.toString();
      if (/msg="rein serving"/.test(log)) {
        res();
      }
    };
    proc.stderr!.on("data", onData);
    proc.once("error", rej);
    proc.once("exit", (code, sig) => rej(new Error(`rein serve exited (${code ?? sig}) before serving:\n${log}`)));
  });
  return server;
}

// refundContract is examples/refund's task with its scripted model inline
// (as examples/grpcurl/start_run.json has it); change edits the JSON
// (protojson names) first.
export function refundContract(change?: (task: JsonObject, script: JsonObject[]) => void): TaskContract {
  const task = JSON.parse(readFileSync(join(repoDir, "examples/refund/task.json"), "utf8")) as JsonObject;
  const script = readFileSync(join(repoDir, "examples/refund/model.jsonl"), "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as JsonObject);
  change?.(task, script);
  task["model"] = { provider: "script", script: script as JsonValue[] };
  return fromJson(TaskContractSchema, task);
}

// until polls cond every few milliseconds until it holds, or fails after
// ms with what.
export async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
