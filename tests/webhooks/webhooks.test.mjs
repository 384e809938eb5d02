// rein's webhooks received by a receiver no one here wrote: every
// delivery is verified by the standardwebhooks package (npm, pinned in
// package.json and package-lock.json), with each of the two secrets of a
// rotation. The receiver fails a third of the first attempts (a 500, or
// no answer until rein's --webhook-timeout), is restarted once, and
// `rein serve` is killed with SIGKILL mid-delivery and restarted on its
// file. Runs with approvals are driven through the CLI: REIN_WEBHOOK_RUNS
// of them (60 by default; 500 is the long form).
//
// Pass: every committed status change is delivered (acked) at least once;
// nothing is delivered that was never committed (every id names a
// committed event); an id means one event at every attempt; per run, the
// first acks of the deliveries follow the sequence of the events; every
// signature verifies.
// Repeats are counted and reported.
import { spawn, execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createHTTP } from "node:http";
import { createServer as createNet } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Webhook } from "standardwebhooks";

const run = promisify(execFile);
const repoDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const reinBin = process.env.REIN_BIN ? resolve(process.env.REIN_BIN) : join(repoDir, ".bin/rein");
const runs = Number(process.env.REIN_WEBHOOK_RUNS ?? 60);
// REIN_WEBHOOK_WAIT_S bounds the wait for the last delivery (180s).
const example = (f) => join(repoDir, "examples/refund", f);

const secrets = [1, 2].map(() => "whsec_" + randomBytes(32).toString("base64"));

async function freePort() {
  const s = createNet();
  await new Promise((ok) => s.listen(0, "127.0.0.1", ok));
  const port = s.address().port;
  await new Promise((ok) => s.close(ok));
  return port;
}

// serve starts `rein serve` on db and resolves once it serves.
function serve(db, port, dir) {
  const p = spawn(reinBin, [
    "serve", "--listen", `127.0.0.1:${port}`, "--db", db,
    "--tools", `fixture:${example("tools.json")}`, "--fixture-ledger", join(dir, "ledger"),
    "--webhook-allow-private", "--webhook-timeout", "1s", "--log-level", "error",
  ], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  return new Promise((ok, fail) => {
    p.stderr.on("data", (b) => {
      log += b;
      if (log.includes("rein serving")) ok(p);
    });
    p.on("exit", (code) => fail(new Error(`rein serve exited ${code}:\n${log}`)));
    // The log level hides "rein serving": poll the port instead.
    const tick = setInterval(async () => {
      try {
        await run(reinBin, ["version", "--server", `127.0.0.1:${port}`], { timeout: 5000 });
        clearInterval(tick);
        ok(p);
      } catch {}
    }, 100);
    p.on("exit", () => clearInterval(tick));
  });
}

async function rein(args, okCodes = [0]) {
  try {
    const { stdout } = await run(reinBin, args, { maxBuffer: 64 << 20, timeout: 60000 });
    return stdout;
  } catch (e) {
    if (okCodes.includes(e.code)) return e.stdout;
    throw new Error(`rein ${args.join(" ")}: exit ${e.code}\n${e.stderr}`);
  }
}

// receiver verifies, fails a third of first attempts, and records.
function receiver(port) {
  const verifiers = secrets.map((s) => new Webhook(s));
  const r = {
    attempts: new Map(), // id -> attempts seen
    acked: [], // {id, run, seq}, in the order acked
    bodies: new Map(), // id -> the body first seen
    invalid: 0,
    changedBody: 0,
    server: null,
    sockets: new Set(),
  };
  const handler = (req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const headers = { "webhook-id": req.headers["webhook-id"], "webhook-timestamp": req.headers["webhook-timestamp"], "webhook-signature": req.headers["webhook-signature"] };
      let payload;
      try {
        for (const v of verifiers) payload = v.verify(body, headers);
      } catch {
        r.invalid++;
        res.writeHead(400).end();
        return;
      }
      const id = headers["webhook-id"];
      const n = (r.attempts.get(id) ?? 0) + 1;
      r.attempts.set(id, n);
      if (r.bodies.has(id) && r.bodies.get(id) !== body) r.changedBody++;
      r.bodies.set(id, body);
      const h = createHash("sha256").update(id).digest()[0];
      if (n === 1 && h % 3 === 0) {
        if (h % 2 === 0) {
          res.writeHead(500).end("try later");
        } else {
          setTimeout(() => res.destroy(), 1500); // no answer within rein's 1s
        }
        return;
      }
      r.acked.push({ id, run: payload.data.run_id, seq: payload.data.sequence });
      res.writeHead(204).end();
    });
  };
  r.start = () =>
    new Promise((ok) => {
      r.server = createHTTP(handler);
      r.server.on("connection", (s) => {
        r.sockets.add(s);
        s.on("close", () => r.sockets.delete(s));
      });
      r.server.listen(port, "127.0.0.1", ok);
    });
  r.stop = () =>
    new Promise((ok) => {
      r.server.close(ok);
      for (const s of r.sockets) s.destroy();
    });
  return r;
}

// pool runs f over items, width at a time.
async function pool(items, width, f) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await f(items[next++]);
  }));
}

test(`webhooks of ${runs} runs with approvals reach a standardwebhooks receiver through failures, a receiver restart and a SIGKILL`, { timeout: 900000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "rein-webhooks-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const db = join(dir, "rein.db");
  const [port, hookPort] = [await freePort(), await freePort()];
  const server = `127.0.0.1:${port}`;
  const recv = receiver(hookPort);
  await recv.start();
  t.after(() => recv.stop());
  let proc = await serve(db, port, dir);
  t.after(() => proc.kill("SIGKILL"));

  writeFileSync(join(dir, "secrets"), secrets.join("\n") + "\n");
  await rein(["webhook", "create", "oncall", "--url", `http://127.0.0.1:${hookPort}/hook`, "--secret-file", join(dir, "secrets"), "--server", server]);

  const ids = [];
  const drive = async () => {
    const out = await rein(["run", example("task.json"), "--model", `script:${example("model.jsonl")}`, "--server", server, "--json"], [10]);
    const started = JSON.parse(out);
    const id = started.run_id;
    ids.push(id);
    await rein(["approve", id, started.pending.proposal.proposal_id, "--server", server, "--json"]);
  };
  const half = Math.floor(runs / 2);
  await pool(Array.from({ length: half }), 6, drive);

  // Mid-delivery: some deliveries are waiting on their backoff, one may be
  // on the wire. Kill rein, restart the receiver while it is down, start
  // rein again on its file.
  proc.kill("SIGKILL");
  await new Promise((ok) => proc.once("exit", ok));
  await recv.stop();
  await recv.start();
  proc = await serve(db, port, dir);

  await pool(Array.from({ length: runs - half }), 6, drive);

  // What was committed: each run's creation and status changes.
  const want = new Map(); // id -> {run, seq}
  for (const id of ids) {
    const out = await rein(["events", id, "--server", server, "--json"]);
    for (const line of out.split("\n").filter((l) => l.trim() !== "")) {
      const ev = JSON.parse(line);
      if (ev.run_started || ev.status_changed) {
        const seq = Number(ev.sequence ?? 1);
        want.set(`msg_oncall_${id}_${seq}`, { run: id, seq });
      }
    }
  }
  assert.equal(want.size >= runs * 4, true, `${want.size} status changes committed for ${runs} runs`);

  // Retries back off from 5s: a minute covers a first failure's few.
  const deadline = Date.now() + Number(process.env.REIN_WEBHOOK_WAIT_S ?? 180) * 1000;
  const missing = () => [...want.keys()].filter((id) => !recv.acked.some((a) => a.id === id));
  const ackedIDs = () => new Set(recv.acked.map((a) => a.id));
  while (Date.now() < deadline) {
    const got = ackedIDs();
    if ([...want.keys()].every((id) => got.has(id))) break;
    await new Promise((ok) => setTimeout(ok, 250));
  }
  assert.deepEqual(missing(), [], "committed status changes never delivered");
  const never = [...recv.attempts.keys()].filter((id) => !want.has(id));
  assert.deepEqual(never, [], "deliveries of events never committed");
  assert.equal(recv.invalid, 0, "deliveries whose signature did not verify");
  assert.equal(recv.changedBody, 0, "an id sent with two bodies");
  // Order per run: a receiver that drops repeats by id (as it must: a
  // delivery taken just before a SIGKILL is sent again, with the ones
  // after it) sees each run's deliveries in the order of its events.
  const last = new Map();
  const first = new Set();
  for (const a of recv.acked) {
    if (first.has(a.id)) continue;
    first.add(a.id);
    assert.equal(a.seq > (last.get(a.run) ?? 0), true, `run ${a.run}: delivery of sequence ${a.seq} first acked after ${last.get(a.run)}`);
    last.set(a.run, a.seq);
  }
  const repeats = recv.acked.length - ackedIDs().size;
  const attempts = [...recv.attempts.values()].reduce((s, n) => s + n, 0);
  t.diagnostic(`${runs} runs, ${want.size} status changes delivered; ${attempts} attempts, ${recv.acked.length} acked, ${repeats} repeats acked`);
  console.log(`webhooks: ${runs} runs, ${want.size} status changes delivered; ${attempts} attempts, ${recv.acked.length} acked, ${repeats} repeats acked`);
});
