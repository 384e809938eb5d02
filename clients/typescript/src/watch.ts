// Watching runs: the loops of ReinClient.watchRun and watchRuns, which open
// their stream again after any break, from where they were, on the next
// server, with backoff (client.go's Watch and WatchRuns).
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import type { Event } from "./gen/rein/v1/event_pb.js";
import type { RunStatus } from "./gen/rein/v1/run_pb.js";
import { WatchRunsRequestSchema, type ModelOutput, type RunChange } from "./gen/rein/v1/run_service_pb.js";
import { ReinError, toReinError } from "./errors.js";
import { jitter, sleep, type Backoff } from "./backoff.js";
import type { Pool } from "./transport.js";

// How many times in a row a watch tries again after an error other than
// Unavailable with no event handed over in between (maxStuckRetries).
export const MAX_STUCK_RETRIES = 5;

export interface WatchRunOptions {
  // The first sequence wanted (1, the default: from the run's first event).
  fromSeq?: number | bigint | undefined;
  // Or: only events with a greater sequence (the API's after_sequence).
  afterSequence?: number | bigint | undefined;
  // Ends the watch when aborted.
  signal?: AbortSignal | undefined;
}

export interface WatchRunsOptions {
  // Only changes to one of these statuses; empty: all.
  statuses?: RunStatus[] | undefined;
  // Only runs carrying every one of these labels.
  labels?: Record<string, string> | undefined;
  // Only changes with a greater cursor; 0: from the first.
  afterCursor?: number | bigint | undefined;
  // Ends the watch when aborted.
  signal?: AbortSignal | undefined;
}

// How long an outage goes on before onReconnect is told of it again
// (milliseconds): it is told when a watch first loses its stream after an
// event, then at most this often while the watch has handed over nothing
// since.
export const RECONNECT_TELL_EVERY_MS = 30_000;

// Why a watch lost its stream.
export enum ReconnectCause {
  // No server answered, or the one that did went away (stopped, restarted,
  // the connection dropped): Unavailable.
  UNAVAILABLE = "unavailable",
  // The server ended a stream that never ends by itself (watchRuns).
  STREAM_ENDED = "stream_ended",
  // The server asked the client to wait (ResourceExhausted).
  OVERLOADED = "overloaded",
  // The server failed the call: Internal, Unknown, Aborted or
  // DeadlineExceeded, retried MAX_STUCK_RETRIES times in a row at most.
  SERVER_ERROR = "server_error",
}

// Reconnect is what onReconnect is told: a watch lost its stream and will
// open it again after waitMs. String(it) is one line for a log.
export class Reconnect {
  constructor(
    // Why the stream was lost.
    readonly cause: ReconnectCause,
    // The server that failed (as given to connect).
    readonly server: string,
    // How many times in a row the watch has failed to get a stream going
    // since it last handed over an event (1 for the first).
    readonly attempt: number,
    // Milliseconds before the next try.
    readonly waitMs: number,
    // The error itself (code, message, details).
    readonly error: ReinError,
  ) {}

  toString(): string {
    return `watch lost its stream from ${this.server} (${this.cause}, ${this.error.codeName}); try ${this.attempt + 1} in ${(this.waitMs / 1000).toFixed(2)} s`;
  }
}

// What a watch takes of its client.
export interface Watcher {
  pool: Pool;
  backoff: Backoff;
  onReconnect: ((r: Reconnect) => void) | undefined;
}

// WatchRunItem is what ReinClient.watchRunOutput yields: an event, or a
// piece of the text of the run's model call in flight (not an event: no
// sequence, not stored, sent again from offset 0 after a reconnection).
export type WatchRunItem = { event: Event; output?: undefined } | { output: ModelOutput; event?: undefined };

// watchEvents is ReinClient.watchRun: a run's events, in order, each once,
// across reconnections.
export async function* watchEvents(w: Watcher, runId: string, opts: WatchRunOptions): AsyncGenerator<Event, void, undefined> {
  for await (const it of watchRunLoop(w, runId, opts, false)) {
    if (it.event) yield it.event;
  }
}

// watchOutput is ReinClient.watchRunOutput: watchEvents that also yields
// the model's text as the server sends it, in order with the events
// (client.go's WatchOutput).
export function watchOutput(w: Watcher, runId: string, opts: WatchRunOptions): AsyncGenerator<WatchRunItem, void, undefined> {
  return watchRunLoop(w, runId, opts, true);
}

// watchRunLoop is the loop of both (client.go's watch): the resume cursor
// is the last event's sequence; an output passes through without moving it
// and, like an event, counts as progress for the backoff.
async function* watchRunLoop(w: Watcher, runId: string, opts: WatchRunOptions, modelOutput: boolean): AsyncGenerator<WatchRunItem, void, undefined> {
  if (opts.fromSeq !== undefined && opts.afterSequence !== undefined) {
    throw new Error("watchRun: give fromSeq or afterSequence, not both");
  }
  let after = opts.afterSequence !== undefined ? BigInt(opts.afterSequence) : opts.fromSeq !== undefined ? BigInt(opts.fromSeq) - 1n : 0n;
  if (after < 0n) after = 0n;
  const r = new Reconnector(w.backoff, w.pool.servers.length, w.onReconnect);
  const ac = linked(opts.signal);
  try {
    for (;;) {
      const at = w.pool.current;
      let failure: unknown;
      try {
        for await (const resp of w.pool.servers[at]!.runs.watchRun({ runId, afterSequence: after, modelOutput }, { signal: ac.signal })) {
          if (resp.output) {
            if (!modelOutput) continue; // not asked for
            yield { output: resp.output };
            r.progress();
            continue;
          }
          const ev = resp.event;
          if (!ev || ev.sequence <= after) continue; // never twice
          if (ev.sequence !== after + 1n) {
            throw new WatchGap(`watch run ${runId}: got sequence ${ev.sequence} after ${after}: the server skipped events`);
          }
          yield { event: ev };
          after = ev.sequence;
          r.progress();
        }
        w.pool.current = at;
        return;
      } catch (e) {
        if (e instanceof WatchGap) throw new ReinError(new ConnectError(e.message, Code.DataLoss));
        failure = e;
      }
      await r.reconnect(w.pool.fail(at, failure, opts.signal), opts.signal, false);
    }
  } finally {
    ac.done();
  }
}

// watchChanges is ReinClient.watchRuns: status changes across the caller's
// runs after a cursor, each once, across reconnections.
export async function* watchChanges(w: Watcher, opts: WatchRunsOptions): AsyncGenerator<RunChange, void, undefined> {
  const req = create(WatchRunsRequestSchema, {
    statuses: opts.statuses ?? [],
    labels: opts.labels ?? {},
    afterCursor: BigInt(opts.afterCursor ?? 0),
  });
  const r = new Reconnector(w.backoff, w.pool.servers.length, w.onReconnect);
  const ac = linked(opts.signal);
  try {
    for (;;) {
      const at = w.pool.current;
      let failure: unknown;
      let ended = false;
      try {
        for await (const resp of w.pool.servers[at]!.runs.watchRuns(req, { signal: ac.signal })) {
          const ch = resp.change;
          if (!ch || ch.cursor <= req.afterCursor) continue;
          yield ch;
          req.afterCursor = ch.cursor;
          r.progress();
        }
        // WatchRuns never ends by itself: a stream that ended OK was cut.
        failure = new ConnectError("the server ended the WatchRuns stream", Code.Unavailable);
        ended = true;
      } catch (e) {
        failure = e;
      }
      await r.reconnect(w.pool.fail(at, failure, opts.signal), opts.signal, ended);
    }
  } finally {
    ac.done();
  }
}

class WatchGap extends Error {}

// Reconnector is a watch's state between reconnections: the next wait,
// the servers tried since the last wait, the tries in a row with no
// progress, and since when (client.go, reconnector); the failures since
// the last progress and when onReconnect was last told of them.
class Reconnector {
  private wait: number;
  private stuck = 0;
  private hops = 0;
  private since = 0;
  private attempt = 0;
  private toldAt: number | undefined;

  constructor(
    private readonly b: Backoff,
    private readonly servers: number,
    private readonly told: ((r: Reconnect) => void) | undefined,
  ) {
    this.wait = b.minMs;
  }

  // progress records an event (or a model output) handed over: the next
  // failure starts afresh.
  progress(): void {
    this.wait = this.b.minMs;
    this.stuck = 0;
    this.hops = 0;
    this.since = 0;
    this.attempt = 0;
    this.toldAt = undefined;
  }

  // reconnect returns when the watch should open its stream again, at once
  // (an Unavailable, with servers of the list not yet tried), or after a
  // jittered pause that doubles up to maxMs (at least a RetryInfo's delay);
  // it throws err when retrying cannot fix it, when it persisted past
  // MAX_STUCK_RETRIES tries in a row or past patienceMs with no progress,
  // and Canceled when signal is aborted.
  // ended says the stream ended OK where it never ends by itself.
  async reconnect(err: ReinError, signal: AbortSignal | undefined, ended: boolean): Promise<void> {
    if (signal?.aborted) throw toReinError(signal.reason ?? err);
    if (!retryable(err.code)) throw err;
    this.attempt++;
    if (err.code !== Code.Unavailable) {
      if (++this.stuck > MAX_STUCK_RETRIES) throw err;
    }
    if (this.since === 0) this.since = Date.now();
    if (err.code === Code.Unavailable && ++this.hops < this.servers && err.retryDelayMs === undefined) {
      return; // the next server, at once, as gRPC's pick_first tries each
    }
    this.hops = 0;
    let pause = jitter(this.wait);
    if (err.retryDelayMs !== undefined) pause = Math.max(pause, err.retryDelayMs);
    const p = this.b.patienceMs;
    if (p && p > 0 && Date.now() - this.since + pause > p) throw err;
    this.tell(err, pause, ended);
    if (!(await sleep(pause, signal))) throw toReinError(signal?.reason ?? err);
    this.wait = Math.min(2 * this.wait, this.b.maxMs);
  }

  // tell tells onReconnect of the outage: at its first pause, then at most
  // every RECONNECT_TELL_EVERY_MS while it lasts.
  private tell(err: ReinError, pause: number, ended: boolean): void {
    if (!this.told) return;
    const now = Date.now();
    if (this.toldAt !== undefined && now - this.toldAt < RECONNECT_TELL_EVERY_MS) return;
    this.toldAt = now;
    this.told(new Reconnect(cause(err, ended), err.server ?? "", this.attempt, pause, err));
  }
}

// cause is why a watch lost its stream, from the error it lost it with.
function cause(err: ReinError, ended: boolean): ReconnectCause {
  switch (err.code) {
    case Code.Unavailable:
      return ended ? ReconnectCause.STREAM_ENDED : ReconnectCause.UNAVAILABLE;
    case Code.ResourceExhausted:
      return ReconnectCause.OVERLOADED;
  }
  return ReconnectCause.SERVER_ERROR;
}

// retryable reports whether a watch error may go away by reconnecting (all
// but Unavailable only MAX_STUCK_RETRIES times in a row).
function retryable(code: Code): boolean {
  switch (code) {
    case Code.Unavailable:
    case Code.Internal:
    case Code.Aborted:
    case Code.ResourceExhausted:
    case Code.Unknown:
    case Code.DeadlineExceeded:
      return true;
  }
  return false;
}

// linked is an AbortController aborted with parent, and by its owner's
// done(), which also stops listening to parent.
function linked(parent: AbortSignal | undefined): { signal: AbortSignal; done: () => void } {
  const ac = new AbortController();
  const onAbort = () => ac.abort(parent?.reason);
  if (parent?.aborted) onAbort();
  else parent?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: ac.signal,
    done: () => {
      parent?.removeEventListener("abort", onAbort);
      ac.abort();
    },
  };
}
