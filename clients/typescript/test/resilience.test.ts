// What the client does when servers die, restart or are not there, and
// what it sends to prove who it is; each success beside its failure twin.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  ReconnectCause,
  type Reconnect,
  connect,
  InvalidArgumentError,
  NotFoundError,
  pendingProposal,
  PermissionDeniedError,
  ReinError,
  ResourceExhaustedError,
  RunStatus,
  UnauthenticatedError,
  UnavailableError,
  type Event,
  type RunChange,
} from "../src/index.js";
import { freePort, refundContract, startServer, tempDir, TOKEN, tokensFile, until, VIEWER_TOKEN } from "./helpers.js";

// A refund run that reads the invoice a few times, each model call taking
// a while, so that it is running for about a second before it proposes the
// refund.
function slowRefund() {
  return refundContract((task, script) => {
    task["budget"] = { max_steps: 20, timeout: "120s" };
    const read = script[0]!;
    const reads = Array.from({ length: 6 }, (_, i) => ({ ...read, delay_ms: 150, decision: { tool_call: { tool: "invoices.get", arguments: { invoice_id: "INV-42" }, call_id: `r${i}` } } }));
    script.splice(0, 1, ...reads);
  });
}

// assertGapFree asserts that events are 1, 2, 3, … with none twice, and
// that they are the run's whole log as the server stores it.
async function assertGapFree(events: Event[], stored: Event[]): Promise<void> {
  const seqs = events.map((e) => e.sequence);
  assert.deepEqual(seqs, seqs.map((_, i) => BigInt(i + 1)), `sequences ${seqs.join(",")}`);
  assert.equal(new Set(seqs).size, seqs.length);
  assert.deepEqual(
    events.map((e) => `${e.sequence}:${e.payload.case}`),
    stored.map((e) => `${e.sequence}:${e.payload.case}`),
  );
}

for (const sig of ["SIGKILL", "SIGTERM"] as const) {
  test(`a watch survives its server being ${sig === "SIGKILL" ? "SIGKILLed" : "stopped (SIGTERM)"} and restarted mid-run: gap-free, no duplicates`, async (t) => {
    let srv = await startServer(t);
    const reconnects: Reconnect[] = [];
    const c = connect({ servers: [srv.address], backoff: { minMs: 20, maxMs: 200 }, onReconnect: (r) => void reconnects.push(r) });
    t.after(() => c.close());

    const { run } = await c.startRun({ contract: slowRefund() });
    const seen: Event[] = [];
    let restarted: Promise<void> | undefined;
    let statusWhenKilled: RunStatus | undefined;
    for await (const ev of c.watchRun(run.runId)) {
      seen.push(ev);
      if (ev.sequence === 4n && !restarted) {
        // Kill the server under the open watch while the run is running,
        // and start it again on the same port and data directory once the
        // watch has found it gone.
        statusWhenKilled = (await c.getRun(run.runId)).status;
        const dir = srv.dir;
        const port = srv.port;
        restarted = (async () => {
          await srv.kill(sig);
          await until("the watch to find the server gone", () => reconnects.length > 0);
          srv = await startServer(t, { dir, port });
        })();
      }
      if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) {
        await c.approve(run.runId, pendingProposal(await c.getRun(run.runId))!);
      }
    }
    await restarted;
    assert.equal(statusWhenKilled, RunStatus.RUNNING);
    // One outage, told once (as the Python client's on_reconnect): not at
    // each of the watch's pauses while the server was down.
    assert.equal(reconnects.length, 1, reconnects.map(String).join("; "));
    const r = reconnects[0]!;
    assert.equal(r.cause, ReconnectCause.UNAVAILABLE);
    assert.equal(r.attempt, 1);
    assert.ok(r.error instanceof UnavailableError);
    assert.match(String(r), /^watch lost its stream from 127\.0\.0\.1:\d+ \(unavailable, UNAVAILABLE\); try 2 in \d+\.\d\d s$/);
    const stored = (await c.runs.listEvents({ runId: run.runId, pageSize: 10000 })).events;
    await assertGapFree(seen, stored);
    assert.ok(seen.some((e) => e.payload.case === "writeCommitted"));
    assert.equal((await c.getRun(run.runId)).status, RunStatus.COMPLETED);
  });
}

test("a watch whose server is killed and stays down gives up with Unavailable after its patience", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address], backoff: { minMs: 20, maxMs: 100, patienceMs: 500 } });
  t.after(() => c.close());
  const { run } = await c.startRun({ contract: slowRefund() });
  const seen: Event[] = [];
  await assert.rejects(async () => {
    for await (const ev of c.watchRun(run.runId)) {
      seen.push(ev);
      if (ev.sequence === 3n) await srv.kill("SIGKILL");
    }
  }, UnavailableError);
  assert.deepEqual(
    seen.map((e) => e.sequence),
    seen.map((_, i) => BigInt(i + 1)),
  );
});

test("watchRuns follows status changes across a restart from its cursor, each once; a bad filter is refused", async (t) => {
  let srv = await startServer(t);
  const c = connect({ servers: [srv.address], backoff: { minMs: 20, maxMs: 200 } });
  t.after(() => c.close());
  const ac = new AbortController();
  t.after(() => ac.abort());
  const { run } = await c.startRun({ contract: refundContract() });
  const changes: RunChange[] = [];
  let restarted = false;
  for await (const ch of c.watchRuns({ labels: { example: "refund" }, signal: ac.signal })) {
    changes.push(ch);
    if (ch.runId === run.runId && ch.status === RunStatus.NEEDS_APPROVAL && !restarted) {
      // Restart the server under the open watch, then decide on the
      // restarted one.
      restarted = true;
      const { dir, port } = srv;
      await srv.kill("SIGKILL");
      srv = await startServer(t, { dir, port });
      await c.approve(run.runId, pendingProposal(await c.getRun(run.runId))!);
    }
    if (ch.runId === run.runId && ch.status === RunStatus.COMPLETED) break;
  }
  const cursors = changes.map((ch) => ch.cursor);
  assert.deepEqual(cursors, [...new Set(cursors)].sort((a, b) => (a < b ? -1 : 1)), `cursors ${cursors.join(",")}`);
  assert.deepEqual(
    changes.map((ch) => ch.status),
    [RunStatus.RUNNING, RunStatus.NEEDS_APPROVAL, RunStatus.RUNNING, RunStatus.COMPLETED],
  );

  // A filter naming no status is refused, not retried.
  await assert.rejects(async () => {
    for await (const _ of c.watchRuns({ statuses: [RunStatus.UNSPECIFIED], signal: ac.signal })) assert.fail("refused");
  }, InvalidArgumentError);
});

test("failover: the first server of the list is dead, the second answers", async (t) => {
  const srv = await startServer(t);
  const dead = `127.0.0.1:${await freePort()}`;
  const c = connect({ servers: [dead, srv.address], backoff: { minMs: 20, maxMs: 100 } });
  t.after(() => c.close());

  const { run } = await c.startRun({ contract: refundContract() });
  const seen: Event[] = [];
  for await (const ev of c.watchRun(run.runId)) {
    seen.push(ev);
    if (ev.payload.case === "approvalRequested") await c.approve(run.runId, pendingProposal(await c.getRun(run.runId))!);
  }
  assert.equal((await c.getRun(run.runId)).status, RunStatus.COMPLETED);
  assert.deepEqual(
    seen.map((e) => e.sequence),
    seen.map((_, i) => BigInt(i + 1)),
  );
  // A watch that starts on the dead server moves on to the live one.
  const fresh = connect({ servers: [dead, srv.address] });
  t.after(() => fresh.close());
  let n = 0;
  for await (const _ of fresh.watchRun(run.runId)) n++;
  assert.equal(n, seen.length);
  // A refusal from the live server is its answer, not a reason to fail over.
  await assert.rejects(c.getRun("run_nope"), NotFoundError);
});

test("failover: every server of the list dead is Unavailable, for a call and a watch", async (t) => {
  const dead = [`127.0.0.1:${await freePort()}`, `127.0.0.1:${await freePort()}`];
  const c = connect({ servers: dead, backoff: { minMs: 20, maxMs: 50, patienceMs: 300 } });
  t.after(() => c.close());
  await assert.rejects(c.getRun("run_x"), (e: unknown) => {
    assert.ok(e instanceof UnavailableError);
    assert.ok(dead.includes(e.server!));
    return true;
  });
  await assert.rejects(async () => {
    for await (const _ of c.watchRun("run_x")) assert.fail("no server, no event");
  }, UnavailableError);
  // retry() gives up the same way once its patience ran out.
  await assert.rejects(c.retry(() => c.getRun("run_x")), UnavailableError);
});

test("token auth: the server's token is accepted; a wrong one, none, or a viewer's for a start is refused", async (t) => {
  const dir = tempDir(t);
  const srv = await startServer(t, { args: ["--tokens", tokensFile(dir)] });
  const good = connect({ servers: [srv.address], token: TOKEN });
  const wrong = connect({ servers: [srv.address], token: "not-the-token" });
  const none = connect({ servers: [srv.address] });
  const viewer = connect({ servers: [srv.address], token: VIEWER_TOKEN });
  t.after(() => [good, wrong, none, viewer].forEach((c) => c.close()));

  const { run } = await good.startRun({ contract: refundContract() });
  assert.equal(run.principal, "ts-operator");
  assert.equal((await viewer.getRun(run.runId)).runId, run.runId);

  await assert.rejects(wrong.getRun(run.runId), UnauthenticatedError);
  await assert.rejects(none.getRun(run.runId), UnauthenticatedError);
  await assert.rejects(async () => {
    for await (const _ of wrong.watchRun(run.runId)) assert.fail("a refused watch yields nothing");
  }, UnauthenticatedError);
  await assert.rejects(viewer.startRun({ contract: refundContract() }), PermissionDeniedError);

  // The token never goes in plaintext to a host that is not loopback,
  // unless told to.
  assert.throws(() => connect({ servers: ["192.0.2.1:7233"], token: TOKEN }), /plaintext/);
  connect({ servers: ["192.0.2.1:7233"], token: TOKEN, insecureToken: true }).close();
});

test("ResourceExhausted with a RetryInfo is retried after the server's delay; within a short timeout it is thrown with the delay", async (t) => {
  // One call a burst, two a second: each call right after another waits
  // about half a second.
  const srv = await startServer(t, { args: ["--rate", "2", "--burst", "1"] });
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());
  for (let i = 0; i < 3; i++) await assert.rejects(c.getRun(`run_nope${i}`), NotFoundError);

  await assert.rejects(c.getRun("run_nope", { timeoutMs: 50 }), (e: unknown) => {
    assert.ok(e instanceof ResourceExhaustedError, String(e));
    assert.ok(e.retryDelay !== undefined && e.retryDelay > 0, `retryDelay ${e.retryDelay}`);
    assert.match(e.rawMessage, /rate limit/);
    return true;
  });
});

test("the Connect protocol, to rein serve --http", async (t) => {
  const httpPort = await freePort();
  await startServer(t, { args: ["--http", `127.0.0.1:${httpPort}`] });
  const c = connect({ servers: [`127.0.0.1:${httpPort}`], protocol: "connect" });
  t.after(() => c.close());
  const { run } = await c.startRun({ contract: refundContract() });
  let paused = false;
  for await (const ev of c.watchRun(run.runId)) {
    if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) {
      paused = true;
      break;
    }
  }
  assert.ok(paused);
  await assert.rejects(c.getRun("run_nope"), NotFoundError);
});

test("mTLS: a client certificate the server's CA signed is its principal; none is refused", async (t) => {
  const dir = tempDir(t);
  const pem = (name: string) => readFileSync(join(dir, name));
  try {
    makeCerts(dir);
  } catch (e) {
    t.skip(`openssl could not make the test certificates: ${String(e)}`);
    return;
  }
  const tokens = tokensFile(dir, [{ id: "ts-cert", tenant: "ts", roles: ["operator"], cert_cn: "ts-client" }]);
  const srv = await startServer(t, {
    args: ["--tokens", tokens, "--tls-cert", join(dir, "server.pem"), "--tls-key", join(dir, "server.key"), "--client-ca", join(dir, "ca.pem")],
  });
  const c = connect({ servers: [srv.address], tls: { ca: pem("ca.pem"), cert: pem("client.pem"), key: pem("client.key") } });
  const noCert = connect({ servers: [srv.address], tls: { ca: pem("ca.pem") }, backoff: { patienceMs: 200 } });
  const plain = connect({ servers: [srv.address] });
  t.after(() => [c, noCert, plain].forEach((x) => x.close()));

  const info = await c.runs.getServerInfo({});
  assert.equal(info.caller?.principal, "ts-cert");
  const { run } = await c.startRun({ contract: refundContract() });
  assert.equal(run.principal, "ts-cert");

  // Without a certificate the server ends the TLS handshake: Node's TLS
  // error, as Connect reports it (Internal), not retried.
  await assert.rejects(noCert.getRun(run.runId), (e: unknown) => e instanceof ReinError && /certificate required/i.test(e.message));
  // A plaintext client gets no answer from a TLS port.
  await assert.rejects(plain.getRun(run.runId), UnavailableError);
});

// makeCerts writes a CA, a server certificate for 127.0.0.1 and a client
// certificate (CN ts-client) it signed into dir.
function makeCerts(dir: string): void {
  const ssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=rein-ts-test-ca");
  for (const [name, subj, ext] of [
    ["server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"],
    ["client", "/CN=ts-client", "extendedKeyUsage=clientAuth\n"],
  ] as const) {
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subj);
    execFileSync("sh", ["-c", `printf '${ext}' > ${name}.ext`], { cwd: dir });
    ssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${name}.pem`, "-days", "1", "-extfile", `${name}.ext`);
  }
}
