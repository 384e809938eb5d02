// The client of a rein server, as thin as the Go client (client/client.go,
// client/retry.go): the generated RunService over gRPC (or Connect), a
// bearer token, TLS and mTLS, several servers tried in order, and watches
// that survive dropped connections and server restarts.
import { randomUUID } from "node:crypto";
import { isIP } from "node:net";
import { create, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type CallOptions as ConnectCallOptions, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import type { Event } from "./gen/rein/v1/event_pb.js";
import type { TaskContractSchema } from "./gen/rein/v1/contract_pb.js";
import type { PendingAction, Proposal, Run, RunStatus } from "./gen/rein/v1/run_pb.js";
import {
  ApprovalVerdict,
  RaiseBudgetRequestSchema,
  RunService,
  WatchRunsRequestSchema,
  type ListRunsRequestSchema,
  type ListRunsResponse,
  type RunChange,
} from "./gen/rein/v1/run_service_pb.js";
import { ReinError, toReinError } from "./errors.js";

// The PEM contents (not file names) of the TLS material, as Node's tls
// options take them: read files with fs.readFileSync.
export interface TlsOptions {
  // The CA that signs the servers' certificates; unset: the system's roots.
  ca?: string | Buffer | Array<string | Buffer>;
  // The client's certificate and key, for mTLS (rein serve --client-ca).
  cert?: string | Buffer;
  key?: string | Buffer;
  // The name the servers' certificates are verified against, when it is
  // not each address's host.
  serverName?: string;
}

// How long a watch and retry() wait between tries: the first wait is
// minMs, each next one doubles (with jitter) up to maxMs. patienceMs, when
// set, is how long they go on trying a server that stays unavailable with
// no progress before they throw the last error; unset: for as long as the
// caller's signal allows.
export interface BackoffOptions {
  minMs?: number;
  maxMs?: number;
  patienceMs?: number;
}

export const DEFAULT_BACKOFF_MIN_MS = 50;
export const DEFAULT_BACKOFF_MAX_MS = 5000;

// How many times a unary call is sent while the server keeps answering
// ResourceExhausted with a RetryInfo (client.MaxRetryInfoAttempts).
export const MAX_RETRY_INFO_ATTEMPTS = 4;

// How many times in a row a watch tries again after an error other than
// Unavailable with no event handed over in between (maxStuckRetries).
export const MAX_STUCK_RETRIES = 5;

export interface ConnectOptions {
  // The servers, "host:port" (or "http://host:port", "https://host:port"),
  // sharing one store: a call goes to the one that answered last, and to
  // the next, in order, when it is Unavailable.
  servers: string[];
  // Sent as "authorization: Bearer TOKEN" on every call.
  token?: string;
  // Turns TLS on (an empty object: the system's roots).
  tls?: TlsOptions;
  // "grpc" (the default) speaks gRPC to rein serve --listen; "connect"
  // speaks the Connect protocol to rein serve --http.
  protocol?: "grpc" | "connect";
  // Lets the token go in plaintext to a host that is not loopback; without
  // it connect() refuses, before any connection is made.
  insecureToken?: boolean;
  // The waits of watchRun, watchRuns and retry().
  backoff?: BackoffOptions;
  // Told each time a watch lost its stream and will open it again after
  // waitMs: err is why it ended.
  onReconnect?: (err: ReinError, waitMs: number) => void;
  // Added to each transport's, after the token's.
  interceptors?: Interceptor[];
}

// Options of one call.
export interface CallOptions {
  // Ends the call (and its retries) when aborted.
  signal?: AbortSignal;
  // Bounds the call, its failover and its RetryInfo waits included.
  timeoutMs?: number;
  // Headers sent with the call.
  headers?: ConnectCallOptions["headers"];
}

// A reference to the proposal a decision is about: its ID and the hash the
// reviewer saw (a Proposal message is one).
export interface ProposalRef {
  proposalId: string;
  hash: string;
}

export type StartRunInit = {
  // The run's contract.
  contract: MessageInitShape<typeof TaskContractSchema>;
  // The idempotency key: the same one returns the same run. Generated
  // (a random UUID) when absent.
  requestId?: string;
};

export interface StartRunResult {
  run: Run;
  // False when requestId named a run that already existed.
  created: boolean;
  // The request ID the run was started with: send it again to retry.
  requestId: string;
}

export interface WatchRunOptions {
  // The first sequence wanted (1, the default: from the run's first event).
  fromSeq?: number | bigint;
  // Or: only events with a greater sequence (the API's after_sequence).
  afterSequence?: number | bigint;
  // Ends the watch when aborted.
  signal?: AbortSignal;
}

export interface WatchRunsOptions {
  // Only changes to one of these statuses; empty: all.
  statuses?: RunStatus[];
  // Only runs carrying every one of these labels.
  labels?: Record<string, string>;
  // Only changes with a greater cursor; 0: from the first.
  afterCursor?: number | bigint;
  // Ends the watch when aborted.
  signal?: AbortSignal;
}

export type RaiseBudgetInit = Omit<MessageInitShape<typeof RaiseBudgetRequestSchema>, "runId" | "$typeName">;

type ServiceClient = Client<typeof RunService>;

interface Server {
  address: string;
  runs: ServiceClient;
  close: () => void;
}

// connect makes a client of the servers. No connection is made until the
// first call.
export function connect(opts: ConnectOptions): ReinClient {
  return new ReinClient(opts);
}

export class ReinClient {
  // The servers, in the order they are tried.
  readonly servers: readonly string[];
  // The server that answered last, as an index of servers.
  private current = 0;
  private readonly conns: Server[];
  private readonly backoff: Required<Pick<BackoffOptions, "minMs" | "maxMs">> & BackoffOptions;
  private readonly onReconnect: ((err: ReinError, waitMs: number) => void) | undefined;

  constructor(opts: ConnectOptions) {
    if (!opts.servers || opts.servers.length === 0) {
      throw new Error("connect: no servers; give servers: ['host:port', …]");
    }
    const interceptors: Interceptor[] = [];
    if (opts.token) {
      const header = "Bearer " + opts.token;
      interceptors.push((next) => (req) => {
        req.header.set("authorization", header);
        return next(req);
      });
    }
    interceptors.push(...(opts.interceptors ?? []));
    this.conns = opts.servers.map((s) => dial(s, opts, interceptors));
    this.servers = this.conns.map((c) => c.address);
    this.backoff = {
      ...opts.backoff,
      minMs: opts.backoff?.minMs && opts.backoff.minMs > 0 ? opts.backoff.minMs : DEFAULT_BACKOFF_MIN_MS,
      maxMs: opts.backoff?.maxMs && opts.backoff.maxMs > 0 ? opts.backoff.maxMs : DEFAULT_BACKOFF_MAX_MS,
    };
    this.onReconnect = opts.onReconnect;
  }

  // The generated RunService client of the server that answered last, for
  // the calls this class does not wrap (ListEvents, ForkRun, …). Its calls
  // fail over to no other server and throw Connect's errors: pass them to
  // toReinError.
  get runs(): ServiceClient {
    return this.conns[this.current]!.runs;
  }

  // Closes every connection; calls in flight end.
  close(): void {
    for (const c of this.conns) c.close();
  }

  // startRun starts a run from a contract under a request ID (generated
  // when absent): the same ID returns the same run, never a second.
  async startRun(init: StartRunInit, opts?: CallOptions): Promise<StartRunResult> {
    const requestId = init.requestId || `ts-${randomUUID()}`;
    const resp = await this.unary((c, o) => c.startRun({ requestId, contract: init.contract }, o), opts);
    return { run: mustRun(resp.run), created: resp.created, requestId };
  }

  // getRun reads a run's current state.
  async getRun(runId: string, opts?: CallOptions): Promise<Run> {
    return mustRun((await this.unary((c, o) => c.getRun({ runId }, o), opts)).run);
  }

  // listRuns lists runs, newest first; pass nextPageToken as pageToken for
  // the next page.
  listRuns(req: Omit<MessageInitShape<typeof ListRunsRequestSchema>, "$typeName"> = {}, opts?: CallOptions): Promise<ListRunsResponse> {
    return this.unary((c, o) => c.listRuns(req, o), opts);
  }

  // approve approves the pending proposal (its ID and the hash the reviewer
  // saw): the write is committed once and the run goes on.
  async approve(runId: string, proposal: ProposalRef, opts?: CallOptions & { reason?: string }): Promise<Run> {
    return this.decide(runId, proposal, ApprovalVerdict.APPROVE, opts?.reason ?? "", false, undefined, opts);
  }

  // deny rejects the pending proposal: the reason goes to the model, or,
  // with endRun, the run ends as denied.
  async deny(runId: string, proposal: ProposalRef, opts?: CallOptions & { reason?: string; endRun?: boolean }): Promise<Run> {
    return this.decide(runId, proposal, ApprovalVerdict.REJECT, opts?.reason ?? "", opts?.endRun ?? false, undefined, opts);
  }

  // revise replaces the pending proposal's arguments (in full): the tool
  // previews the revised write, which waits for approval under a new
  // proposal ID and hash (run.pending).
  async revise(runId: string, proposal: ProposalRef, args: JsonObject, opts?: CallOptions & { reason?: string }): Promise<Run> {
    return this.decide(runId, proposal, ApprovalVerdict.REVISE, opts?.reason ?? "", false, args, opts);
  }

  private async decide(
    runId: string,
    p: ProposalRef,
    verdict: ApprovalVerdict,
    reason: string,
    endRun: boolean,
    args: JsonObject | undefined,
    opts: CallOptions | undefined,
  ): Promise<Run> {
    const req = { runId, proposalId: p.proposalId, proposalHash: p.hash, verdict, reason, endRun, arguments: args };
    return mustRun((await this.unary((c, o) => c.decideApproval(req, o), opts)).run);
  }

  // input answers a run's question (needs_input), which goes on.
  async input(runId: string, text: string, opts?: CallOptions): Promise<Run> {
    return mustRun((await this.unary((c, o) => c.provideInput({ runId, text }, o), opts)).run);
  }

  // cancel cancels a running or paused run.
  async cancel(runId: string, opts?: CallOptions & { reason?: string }): Promise<Run> {
    return mustRun((await this.unary((c, o) => c.cancelRun({ runId, reason: opts?.reason ?? "" }, o), opts)).run);
  }

  // steer sends a running run a message, which the model reads with its
  // next call; the same requestId (generated when absent) records nothing
  // again.
  async steer(runId: string, text: string, opts?: CallOptions & { requestId?: string }): Promise<{ run: Run; created: boolean }> {
    const requestId = opts?.requestId || `ts-${randomUUID()}`;
    const resp = await this.unary((c, o) => c.steerRun({ runId, text, requestId }, o), opts);
    return { run: mustRun(resp.run), created: resp.created };
  }

  // raiseBudget raises the budget of a run paused on it (needs_budget) and
  // carries it on.
  async raiseBudget(runId: string, raise: RaiseBudgetInit, opts?: CallOptions): Promise<Run> {
    const req = create(RaiseBudgetRequestSchema, { ...raise, runId });
    return mustRun((await this.unary((c, o) => c.raiseBudget(req, o), opts)).run);
  }

  // watchRun yields a run's events in order, each once, from fromSeq (or
  // after afterSequence), history then live, and ends when the run is
  // terminal and every event was yielded. When the stream breaks (a
  // dropped connection, a server stopping or restarting), it opens it again
  // on the next server of the list, with backoff, after the last sequence it
  // yielded: no gap, no duplicate. It throws what retrying cannot fix
  // (NotFound, PermissionDenied, OutOfRange, …), an error other than
  // Unavailable that persisted MAX_STUCK_RETRIES times in a row, the last
  // Unavailable once backoff.patienceMs ran out, and Canceled when signal
  // is aborted. Breaking out of the loop closes the stream.
  async *watchRun(runId: string, opts: WatchRunOptions = {}): AsyncGenerator<Event, void, undefined> {
    if (opts.fromSeq !== undefined && opts.afterSequence !== undefined) {
      throw new Error("watchRun: give fromSeq or afterSequence, not both");
    }
    let after = opts.afterSequence !== undefined ? BigInt(opts.afterSequence) : opts.fromSeq !== undefined ? BigInt(opts.fromSeq) - 1n : 0n;
    if (after < 0n) after = 0n;
    const r = this.reconnector();
    const ac = linked(opts.signal);
    try {
      for (;;) {
        const at = this.current;
        let failure: unknown;
        try {
          for await (const resp of this.conns[at]!.runs.watchRun({ runId, afterSequence: after }, { signal: ac.signal })) {
            const ev = resp.event;
            if (!ev || ev.sequence <= after) continue; // never twice
            if (ev.sequence !== after + 1n) {
              throw new WatchGap(`watch run ${runId}: got sequence ${ev.sequence} after ${after}: the server skipped events`);
            }
            yield ev;
            after = ev.sequence;
            r.progress();
          }
          this.current = at;
          return;
        } catch (e) {
          if (e instanceof WatchGap) throw new ReinError(new ConnectError(e.message, Code.DataLoss));
          failure = e;
        }
        await r.reconnect(this.fail(at, failure, opts.signal), opts.signal);
      }
    } finally {
      ac.done();
    }
  }

  // watchRuns yields status changes across the caller's runs after a
  // cursor, each once, reconnecting like watchRun. It ends only when signal
  // is aborted or the loop breaks, or with an error retrying cannot fix.
  async *watchRuns(opts: WatchRunsOptions = {}): AsyncGenerator<RunChange, void, undefined> {
    const req = create(WatchRunsRequestSchema, {
      statuses: opts.statuses ?? [],
      labels: opts.labels ?? {},
      afterCursor: BigInt(opts.afterCursor ?? 0),
    });
    const r = this.reconnector();
    const ac = linked(opts.signal);
    try {
      for (;;) {
        const at = this.current;
        let failure: unknown;
        try {
          for await (const resp of this.conns[at]!.runs.watchRuns(req, { signal: ac.signal })) {
            const ch = resp.change;
            if (!ch || ch.cursor <= req.afterCursor) continue;
            yield ch;
            req.afterCursor = ch.cursor;
            r.progress();
          }
          // WatchRuns never ends by itself: a stream that ended OK was cut.
          failure = new ConnectError("the server ended the WatchRuns stream", Code.Unavailable);
        } catch (e) {
          failure = e;
        }
        await r.reconnect(this.fail(at, failure, opts.signal), opts.signal);
      }
    } finally {
      ac.done();
    }
  }

  // retry calls fn until it returns or throws anything but Unavailable,
  // waiting between tries as backoff says (doubling, with jitter, at least
  // a RetryInfo's delay), for as long as signal and backoff.patienceMs
  // (counted from the first Unavailable) allow; given up, it throws the
  // last Unavailable. fn must be safe to repeat: a call whose answer was
  // lost may have been applied (a startRun with its requestId, a read).
  async retry<T>(fn: (signal: AbortSignal | undefined) => Promise<T>, opts: { signal?: AbortSignal } = {}): Promise<T> {
    let wait = this.backoff.minMs;
    let since = 0;
    let unavailable: ReinError | undefined;
    for (;;) {
      let err: ReinError;
      try {
        return await fn(opts.signal);
      } catch (e) {
        err = toReinError(e, opts.signal?.aborted);
      }
      if (err.code !== Code.Unavailable) {
        // The caller's signal ended the try, not the server: say why the
        // server could not be reached.
        throw unavailable && opts.signal?.aborted ? unavailable : err;
      }
      unavailable = err;
      if (since === 0) since = Date.now();
      let pause = jitter(wait);
      if (err.retryDelayMs !== undefined) pause = Math.max(pause, err.retryDelayMs);
      const p = this.backoff.patienceMs;
      if (p && p > 0 && Date.now() - since + pause > p) throw err;
      if (!(await sleep(pause, opts.signal))) throw err;
      wait = Math.min(2 * wait, this.backoff.maxMs);
    }
  }

  // fail is the ReinError of a stream that ended on server at, and moves
  // on to the next server when that one is Unavailable.
  private fail(at: number, e: unknown, signal: AbortSignal | undefined): ReinError {
    const err = toReinError(e, signal?.aborted);
    err.server ??= this.conns[at]!.address;
    if (err.code === Code.Unavailable && this.current === at) this.current = (at + 1) % this.conns.length;
    return err;
  }

  private reconnector(): Reconnector {
    return new Reconnector(this.backoff, this.conns.length, this.onReconnect);
  }

  // unary sends a call to the server that answered last, and on to the
  // next ones, in order, while they are Unavailable; a ResourceExhausted
  // with a RetryInfo is sent again after its delay (plus up to 10%),
  // MAX_RETRY_INFO_ATTEMPTS times at most, never past the call's timeout.
  private async unary<T>(call: (c: ServiceClient, o: CallOptions) => Promise<T>, opts: CallOptions = {}): Promise<T> {
    const deadline = opts.timeoutMs !== undefined ? Date.now() + opts.timeoutMs : undefined;
    for (let attempt = 1; ; attempt++) {
      let err: ReinError;
      try {
        return await this.failover(call, opts, deadline);
      } catch (e) {
        err = toReinError(e);
      }
      if (err.code !== Code.ResourceExhausted || attempt >= MAX_RETRY_INFO_ATTEMPTS || err.retryDelayMs === undefined) throw err;
      const delay = err.retryDelayMs + Math.floor(Math.random() * (err.retryDelayMs / 10 + 1));
      if (deadline !== undefined && deadline - Date.now() < delay) throw err;
      if (!(await sleep(delay, opts.signal))) throw err;
    }
  }

  private async failover<T>(call: (c: ServiceClient, o: CallOptions) => Promise<T>, opts: CallOptions, deadline: number | undefined): Promise<T> {
    const n = this.conns.length;
    const start = this.current;
    let last: ReinError | undefined;
    for (let i = 0; i < n; i++) {
      const at = (start + i) % n;
      const o: CallOptions = { signal: opts.signal, headers: opts.headers };
      if (deadline !== undefined) o.timeoutMs = Math.max(1, deadline - Date.now());
      try {
        const resp = await call(this.conns[at]!.runs, o);
        this.current = at;
        return resp;
      } catch (e) {
        const err = toReinError(e, opts.signal?.aborted);
        err.server ??= this.conns[at]!.address;
        if (err.code !== Code.Unavailable || opts.signal?.aborted) throw err;
        last = err;
      }
    }
    throw last!;
  }
}

// pendingProposal is the proposal a run waits on, if it waits on one.
export function pendingProposal(run: Run | undefined): Proposal | undefined {
  const a: PendingAction["action"] | undefined = run?.pending?.action;
  return a?.case === "proposal" ? a.value : undefined;
}

class WatchGap extends Error {}

// Reconnector is a watch's state between reconnections: the next wait,
// the servers tried since the last wait, the tries in a row with no
// progress, and since when (client.go, reconnector).
class Reconnector {
  private wait: number;
  private stuck = 0;
  private hops = 0;
  private since = 0;

  constructor(
    private readonly b: Required<Pick<BackoffOptions, "minMs" | "maxMs">> & BackoffOptions,
    private readonly servers: number,
    private readonly told: ((err: ReinError, waitMs: number) => void) | undefined,
  ) {
    this.wait = b.minMs;
  }

  // progress records an event handed over: the next failure starts afresh.
  progress(): void {
    this.wait = this.b.minMs;
    this.stuck = 0;
    this.hops = 0;
    this.since = 0;
  }

  // reconnect returns when the watch should open its stream again, at once
  // (an Unavailable, with servers of the list not yet tried), or after a
  // jittered pause that doubles up to maxMs (at least a RetryInfo's delay);
  // it throws err when retrying cannot fix it, when it persisted past
  // MAX_STUCK_RETRIES tries in a row or past patienceMs with no progress,
  // and Canceled when signal is aborted.
  async reconnect(err: ReinError, signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted) throw toReinError(signal.reason ?? err);
    if (!retryable(err.code)) throw err;
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
    this.told?.(err, pause);
    if (!(await sleep(pause, signal))) throw toReinError(signal?.reason ?? err);
    this.wait = Math.min(2 * this.wait, this.b.maxMs);
  }
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

// jitter is a pause in [wait/2, wait].
function jitter(wait: number): number {
  return Math.floor(wait / 2 + Math.random() * (wait / 2 + 1));
}

// sleep waits ms, or until signal aborts (then it resolves false).
function sleep(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(t);
      signal?.removeEventListener("abort", onAbort);
      resolve(ok);
    };
    const onAbort = () => done(false);
    const t = setTimeout(() => done(true), ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
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

function mustRun(run: Run | undefined): Run {
  if (!run) throw new ReinError(new ConnectError("the server answered without the run", Code.Internal));
  return run;
}

// dial makes one server's transport; no connection is made yet.
function dial(server: string, opts: ConnectOptions, interceptors: Interceptor[]): Server {
  const s = server.trim();
  if (s === "") throw new Error("connect: an empty address in servers; give host:port");
  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(s) ? s : `${opts.tls ? "https" : "http"}://${s}`);
  } catch {
    throw new Error(`connect: server ${JSON.stringify(s)} is not host:port`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new Error(`connect: server ${s}: the scheme must be http or https`);
  }
  if (url.protocol === "http:" && opts.tls) {
    throw new Error(`connect: server ${s} is http://, but tls is set: give host:port or https://`);
  }
  if (!url.port) throw new Error(`connect: server ${s} has no port; give host:port`);
  const secure = url.protocol === "https:";
  if (opts.token && !secure && !opts.insecureToken && !loopback(url.hostname)) {
    throw new Error(
      `connect: refusing to send the bearer token in plaintext to ${s}, which is not a loopback address: ` +
        "use TLS (tls), or set insecureToken on a network you trust",
    );
  }
  const baseUrl = `${url.protocol}//${url.host}`;
  const nodeOptions = secure
    ? {
        ...(opts.tls?.ca !== undefined ? { ca: opts.tls.ca } : {}),
        ...(opts.tls?.cert !== undefined ? { cert: opts.tls.cert } : {}),
        ...(opts.tls?.key !== undefined ? { key: opts.tls.key } : {}),
        ...(opts.tls?.serverName !== undefined ? { servername: opts.tls.serverName } : {}),
      }
    : {};
  // Pings find a server gone silent under an open watch; rein's keepalive
  // policy allows one every 10 s.
  const sessionManager = new Http2SessionManager(baseUrl, { pingIntervalMs: 30_000, pingTimeoutMs: 15_000, connectTimeoutMs: 10_000 }, nodeOptions);
  const common = { baseUrl, httpVersion: "2" as const, sessionManager, interceptors, useBinaryFormat: true };
  const transport: Transport = opts.protocol === "connect" ? createConnectTransport(common) : createGrpcTransport(common);
  return { address: s, runs: createClient(RunService, transport), close: () => sessionManager.abort() };
}

// loopback reports whether host is this machine: "localhost" or a loopback
// IP. Names are not resolved.
function loopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  if (isIP(h) === 6) return h === "::1" || /^::ffff:127\./.test(h) || h === "0:0:0:0:0:0:0:1";
  return false;
}
