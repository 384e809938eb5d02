// watchRunOutput: the model's text as it is written, between the events,
// against a real rein serve (which streams every model call); each success
// beside its failure twin.
import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, pendingProposal, type Reconnect, RunStatus, type Event, type ReinClient, type WatchRunItem } from "../src/index.js";
import { refundContract, startServer, until } from "./helpers.js";

// A refund run whose first model call writes its text in chunks, each
// after delayMs.
function streamedRefund(chunks: string[], delayMs: number) {
  return refundContract((task, script) => {
    task["budget"] = { max_steps: 20, timeout: "120s" };
    script[0]!["chunks"] = chunks.map((text) => ({ text, delay_ms: delayMs }));
  });
}

const CHUNKS = ["Reading ", "the invoice ", "INV-42 first."];

// Calls is each model call's text as a client puts it together: started
// over at every offset 0, each piece at the offset where the text so far
// ends.
interface Call {
  text: string;
  done: boolean;
  resumed: boolean;
  // The index in the items of the call's last output.
  last: number;
}
function assemble(items: WatchRunItem[]): Map<bigint, Call> {
  const calls = new Map<bigint, Call>();
  items.forEach((it, i) => {
    const o = it.output;
    if (!o) return;
    let c = calls.get(o.requested);
    if (!c || o.offset === 0n) {
      c = { text: "", done: false, resumed: o.resumed, last: i };
      calls.set(o.requested, c);
    }
    assert.equal(o.offset, BigInt(Buffer.byteLength(c.text)), `output of call ${o.requested} at offset ${o.offset}, after ${JSON.stringify(c.text)}`);
    c.text += o.text;
    c.done = o.done;
    c.last = i;
  });
  return calls;
}

// drive watches with model output to the run's end, approving its refund.
async function drive(c: ReinClient, runId: string, onItem?: (it: WatchRunItem, i: number) => Promise<void> | void): Promise<WatchRunItem[]> {
  const items: WatchRunItem[] = [];
  for await (const it of c.watchRunOutput(runId)) {
    items.push(it);
    await onItem?.(it, items.length - 1);
    const ev = it.event;
    if (ev?.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) {
      await c.approve(runId, pendingProposal(await c.getRun(runId))!);
    }
  }
  return items;
}

// The index in items of the model_returned event of the call whose
// model_requested has sequence requested.
function returnedAt(items: WatchRunItem[], requested: bigint): number {
  return items.findIndex((it) => it.event && it.event.sequence > requested && it.event.payload.case === "modelReturned");
}

function eventKeys(events: Event[]): string[] {
  return events.map((e) => `${e.sequence}:${e.payload.case}`);
}

test("watchRunOutput yields a call's text as it is written, done before its model_returned, between exactly the run's events", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());

  const { run } = await c.startRun({ contract: streamedRefund(CHUNKS, 300) });
  const items = await drive(c, run.runId);

  const events = items.flatMap((it) => (it.event ? [it.event] : []));
  const stored = (await c.runs.listEvents({ runId: run.runId, pageSize: 10000 })).events;
  assert.deepEqual(eventKeys(events), eventKeys(stored));
  assert.equal(stored.at(-1)?.payload.case, "statusChanged");
  assert.equal((await c.getRun(run.runId)).status, RunStatus.COMPLETED);

  const first = events.find((e) => e.payload.case === "modelRequested")!;
  const calls = assemble(items);
  const call = calls.get(first.sequence);
  assert.ok(call, `no output of the first call (${first.sequence}); calls: ${[...calls.keys()].join(",")}`);
  assert.equal(call.text, CHUNKS.join(""));
  assert.equal(call.done, true);
  assert.equal(call.resumed, false);
  // The text came in more than one piece, as it was written.
  assert.ok(items.filter((it) => it.output?.requested === first.sequence).length > 1);
  const returned = returnedAt(items, first.sequence);
  assert.ok(returned > call.last, `the call's last output (item ${call.last}) comes before its model_returned (item ${returned})`);
  // Every output names a call the watch has seen requested, with its step.
  for (const it of items) {
    if (!it.output) continue;
    const req = events.find((e) => e.sequence === it.output!.requested);
    assert.equal(req?.payload.case, "modelRequested");
    if (req?.payload.case === "modelRequested") assert.equal(it.output.step, req.payload.value.step);
  }
});

test("watchRun of the same kind of run, not asking for model output, yields events only", async (t) => {
  const srv = await startServer(t);
  const c = connect({ servers: [srv.address] });
  t.after(() => c.close());

  const { run } = await c.startRun({ contract: streamedRefund(CHUNKS, 300) });
  const seen: unknown[] = [];
  for await (const ev of c.watchRun(run.runId)) {
    seen.push(ev);
    if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL) {
      await c.approve(run.runId, pendingProposal(await c.getRun(run.runId))!);
    }
  }
  assert.ok(seen.every((m) => (m as { $typeName: string }).$typeName === "rein.v1.Event"), "watchRun yields only events");
  const stored = (await c.runs.listEvents({ runId: run.runId, pageSize: 10000 })).events;
  assert.deepEqual(eventKeys(seen as Event[]), eventKeys(stored));
});

test("watchRunOutput across a SIGKILL and restart mid-call: the call starts over at offset 0, resumed; the events stay gap-free", async (t) => {
  let srv = await startServer(t);
  const reconnects: Reconnect[] = [];
  const c = connect({ servers: [srv.address], backoff: { minMs: 20, maxMs: 200 }, onReconnect: (r) => void reconnects.push(r) });
  t.after(() => c.close());

  const chunks = Array.from({ length: 8 }, (_, i) => `chunk ${i}. `);
  const { run } = await c.startRun({ contract: streamedRefund(chunks, 250) });
  let killedAt = -1;
  let restarted: Promise<void> | undefined;
  const items = await drive(c, run.runId, (it, i) => {
    // Once the first call has written some of its text, kill the server
    // and start it again on the same port and data directory.
    if (restarted || !it.output || it.output.text === "" || it.output.done) return;
    killedAt = i;
    const { dir, port } = srv;
    restarted = (async () => {
      await srv.kill("SIGKILL");
      await until("the watch to find the server gone", () => reconnects.length > 0);
      srv = await startServer(t, { dir, port });
    })();
  });
  await restarted;
  assert.ok(killedAt >= 0, "the server was killed mid-call");
  assert.ok(reconnects.length > 0);

  const events = items.flatMap((it) => (it.event ? [it.event] : []));
  const stored = (await c.runs.listEvents({ runId: run.runId, pageSize: 10000 })).events;
  assert.deepEqual(eventKeys(events), eventKeys(stored));
  assert.deepEqual(
    events.map((e) => e.sequence),
    events.map((_, i) => BigInt(i + 1)),
  );

  // After the kill, the call in flight is sent again from offset 0, resumed,
  // and its text put together from there is the whole of it.
  const after = items.slice(killedAt + 1).flatMap((it) => (it.output ? [it.output] : []));
  const again = after.find((o) => o.offset === 0n && o.resumed);
  assert.ok(again, `no resumed output at offset 0 after the restart: ${JSON.stringify(after.map((o) => [String(o.requested), String(o.offset), o.resumed, o.done]))}`);
  const call = assemble(items).get(again.requested)!;
  assert.equal(call.resumed, true);
  assert.equal(call.text, chunks.join(""));
  assert.equal(call.done, true);
  assert.equal((await c.getRun(run.runId)).status, RunStatus.COMPLETED);
});
