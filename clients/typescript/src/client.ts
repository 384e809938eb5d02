// The client of a rein server, as thin as the Go client (client/client.go,
// client/retry.go): the generated RunService over gRPC (or Connect), a
// bearer token, TLS and mTLS, several servers tried in order (transport.ts),
// and watches that survive dropped connections and server restarts
// (watch.ts).
import { randomUUID } from "node:crypto";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { create, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions as ConnectCallOptions, type Interceptor } from "@connectrpc/connect";

import type { Event } from "./gen/rein/v1/event_pb.js";
import type { TaskContractSchema } from "./gen/rein/v1/contract_pb.js";
import { RunStatus, type PendingAction, type Proposal, type Run } from "./gen/rein/v1/run_pb.js";
import {
  ApprovalVerdict,
  RaiseBudgetRequestSchema,
  type ListRunsRequestSchema,
  type ListRunsResponse,
  type RunChange,
} from "./gen/rein/v1/run_service_pb.js";
import { ReinError, toReinError } from "./errors.js";
import { jitter, resolveBackoff, sleep, type Backoff, type BackoffOptions } from "./backoff.js";
import { Pool, type ServiceClient, type TlsOptions } from "./transport.js";
import { watchChanges, watchEvents, watchOutput, type Reconnect, type WatchRunItem, type WatchRunOptions, type WatchRunsOptions } from "./watch.js";

// How many times a unary call is sent while the server keeps answering
// ResourceExhausted with a RetryInfo (client.MaxRetryInfoAttempts).
export const MAX_RETRY_INFO_ATTEMPTS = 4;

export interface ConnectOptions {
  // The servers, "host:port" (or "http://host:port", "https://host:port"),
  // sharing one store: a call goes to the one that answered last, and to
  // the next, in order, when it is Unavailable.
  servers: string[];
  // Sent as "authorization: Bearer TOKEN" on every call.
  token?: string | undefined;
  // Turns TLS on (an empty object: the system's roots).
  tls?: TlsOptions | undefined;
  // "grpc" (the default) speaks gRPC to rein serve --listen; "connect"
  // speaks the Connect protocol to rein serve --http.
  protocol?: "grpc" | "connect" | undefined;
  // Lets the token go in plaintext to a host that is not loopback; without
  // it connect() refuses, before any connection is made.
  insecureToken?: boolean | undefined;
  // The waits of watchRun, watchRuns and retry().
  backoff?: BackoffOptions | undefined;
  // Told when a watch lost its stream and will open it again: why, which
  // server, the attempt, the wait. Once an outage (at the first pause after
  // an event), then at most every RECONNECT_TELL_EVERY_MS while it lasts.
  onReconnect?: ((r: Reconnect) => void) | undefined;
  // Added to each transport's, after the token's.
  interceptors?: Interceptor[] | undefined;
}

// Options of one call.
export interface CallOptions {
  // Ends the call (and its retries) when aborted.
  signal?: AbortSignal | undefined;
  // Bounds the call, its failover and its RetryInfo waits included.
  timeoutMs?: number | undefined;
  // Headers sent with the call.
  headers?: ConnectCallOptions["headers"] | undefined;
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
  requestId?: string | undefined;
};

export interface StartRunResult {
  run: Run;
  // False when requestId named a run that already existed.
  created: boolean;
  // The request ID the run was started with: send it again to retry.
  requestId: string;
  // Sentences about the contract that did not stop the run but may
  // surprise its caller, such as a proposal TTL that outlives the run's
  // deadline.
  warnings: string[];
}

export type RaiseBudgetInit = Omit<MessageInitShape<typeof RaiseBudgetRequestSchema>, "runId" | "$typeName">;

// connect makes a client of the servers. No connection is made until the
// first call.
export function connect(opts: ConnectOptions): ReinClient {
  return new ReinClient(opts);
}

export class ReinClient {
  // The servers, in the order they are tried.
  readonly servers: readonly string[];
  private readonly pool: Pool;
  private readonly backoff: Backoff;
  private readonly onReconnect: ((r: Reconnect) => void) | undefined;

  constructor(opts: ConnectOptions) {
    this.pool = new Pool(opts);
    this.servers = this.pool.servers.map((s) => s.address);
    this.backoff = resolveBackoff(opts.backoff);
    this.onReconnect = opts.onReconnect;
  }

  // The generated RunService client of the server that answered last, for
  // the calls this class does not wrap (ListEvents, ForkRun, …). Its calls
  // fail over to no other server and throw Connect's errors: pass them to
  // toReinError.
  get runs(): ServiceClient {
    return this.pool.servers[this.pool.current]!.runs;
  }

  // Closes every connection; calls in flight end.
  close(): void {
    this.pool.close();
  }

  // startRun starts a run from a contract under a request ID (generated
  // when absent): the same ID returns the same run, never a second.
  async startRun(init: StartRunInit, opts?: CallOptions): Promise<StartRunResult> {
    const requestId = init.requestId || `ts-${randomUUID()}`;
    const resp = await this.unary((c, o) => c.startRun({ requestId, contract: init.contract }, o), opts);
    return { run: mustRun(resp.run), created: resp.created, requestId, warnings: resp.warnings };
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
  async approve(runId: string, proposal: ProposalRef, opts?: CallOptions & { reason?: string | undefined }): Promise<Run> {
    return this.decide(runId, proposal, ApprovalVerdict.APPROVE, opts?.reason ?? "", false, undefined, opts);
  }

  // deny rejects the pending proposal: the reason goes to the model, or,
  // with endRun, the run ends as denied.
  async deny(runId: string, proposal: ProposalRef, opts?: CallOptions & { reason?: string | undefined; endRun?: boolean | undefined }): Promise<Run> {
    return this.decide(runId, proposal, ApprovalVerdict.REJECT, opts?.reason ?? "", opts?.endRun ?? false, undefined, opts);
  }

  // revise replaces the pending proposal's arguments (in full): the tool
  // previews the revised write, which waits for approval under a new
  // proposal ID and hash (run.pending).
  async revise(runId: string, proposal: ProposalRef, args: JsonObject, opts?: CallOptions & { reason?: string | undefined }): Promise<Run> {
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
  async cancel(runId: string, opts?: CallOptions & { reason?: string | undefined }): Promise<Run> {
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
  watchRun(runId: string, opts: WatchRunOptions = {}): AsyncGenerator<Event, void, undefined> {
    return watchEvents({ pool: this.pool, backoff: this.backoff, onReconnect: this.onReconnect }, runId, opts);
  }

  // watchRunOutput is watchRun that also yields the text of the run's model
  // calls as the model writes it (WatchRunRequest.model_output): items
  // {event} and {output}, in the order the server sends them. An output is
  // not an event: it has no sequence and does not move the resume cursor;
  // after a reconnection the call in flight is sent again from offset 0, so
  // start a call's text (output.requested, output.attempt) over at every
  // output.offset of 0.
  watchRunOutput(runId: string, opts: WatchRunOptions = {}): AsyncGenerator<WatchRunItem, void, undefined> {
    return watchOutput({ pool: this.pool, backoff: this.backoff, onReconnect: this.onReconnect }, runId, opts);
  }

  // watchRuns yields status changes across the caller's runs after a
  // cursor, each once, reconnecting like watchRun. It ends only when signal
  // is aborted or the loop breaks, or with an error retrying cannot fix.
  watchRuns(opts: WatchRunsOptions = {}): AsyncGenerator<RunChange, void, undefined> {
    return watchChanges({ pool: this.pool, backoff: this.backoff, onReconnect: this.onReconnect }, opts);
  }

  // retry calls fn until it returns or throws anything but Unavailable,
  // waiting between tries as backoff says (doubling, with jitter, at least
  // a RetryInfo's delay), for as long as signal and backoff.patienceMs
  // (counted from the first Unavailable) allow; given up, it throws the
  // last Unavailable. fn must be safe to repeat: a call whose answer was
  // lost may have been applied (a startRun with its requestId, a read).
  async retry<T>(fn: (signal: AbortSignal | undefined) => Promise<T>, opts: { signal?: AbortSignal | undefined } = {}): Promise<T> {
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

  // unary sends a call to the server that answered last, and on to the
  // next ones, in order, while they are Unavailable; a ResourceExhausted
  // with a RetryInfo is sent again after its delay (plus up to 10%),
  // MAX_RETRY_INFO_ATTEMPTS times at most, never past the call's timeout.
  private async unary<T>(call: (c: ServiceClient, o: ConnectCallOptions) => Promise<T>, opts: CallOptions = {}): Promise<T> {
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

  private async failover<T>(call: (c: ServiceClient, o: ConnectCallOptions) => Promise<T>, opts: CallOptions, deadline: number | undefined): Promise<T> {
    const n = this.pool.servers.length;
    const start = this.pool.current;
    let last: ReinError | undefined;
    for (let i = 0; i < n; i++) {
      const at = (start + i) % n;
      const o: ConnectCallOptions = {};
      if (opts.signal) o.signal = opts.signal;
      if (opts.headers) o.headers = opts.headers;
      if (deadline !== undefined) o.timeoutMs = Math.max(1, deadline - Date.now());
      try {
        const resp = await call(this.pool.servers[at]!.runs, o);
        this.pool.current = at;
        return resp;
      } catch (e) {
        const err = toReinError(e, opts.signal?.aborted);
        err.server ??= this.pool.servers[at]!.address;
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

// waitsForPerson reports whether a run waits for a person: paused with an
// action pending (a proposal short of its approvals, a question, a budget
// reached) that only a person's decision moves on. A loop that follows a
// run stops there: an approval that is not the last a write needs (a
// grant's approvals of 2 or more) answers with a run that still waits, for
// another approver, and nothing moves it until one approves.
export function waitsForPerson(run: Run | undefined): boolean {
  const paused = run?.status === RunStatus.NEEDS_APPROVAL || run?.status === RunStatus.NEEDS_INPUT || run?.status === RunStatus.NEEDS_BUDGET;
  return paused && run?.pending?.action.case !== undefined;
}

// approvalsWanted is how many more approvals the proposal a run waits on
// needs (0 when it waits on none). Neither the run's starter (run.principal)
// nor one who approved it (approvedBy) may give them.
export function approvalsWanted(run: Run | undefined): number {
  const p = waitsForPerson(run) ? pendingProposal(run) : undefined;
  return p ? Math.max(p.approvals, 1) - p.approvedBy.length : 0;
}

// PauseEnd is when a pause ends if no one acts, and what ends it.
export interface PauseEnd {
  at: Date;
  // "proposal_ttl": the proposal expires; "run_deadline": the run's
  // deadline passes first (the run ends budget_exhausted); "raise_ttl": a
  // budget pause expires.
  by: "proposal_ttl" | "run_deadline" | "raise_ttl";
}

// pauseEnds is when the pause a run waits in ends, as the server derives it
// (run.pending.endsAt, endsBy): the earlier of the proposal's expiry and the
// run's deadline. Undefined when the run waits for no person or nothing
// ends its pause.
export function pauseEnds(run: Run | undefined): PauseEnd | undefined {
  const p = run?.pending;
  if (!waitsForPerson(run) || !p?.endsAt) return undefined;
  return { at: timestampDate(p.endsAt), by: p.endsBy as PauseEnd["by"] };
}

function mustRun(run: Run | undefined): Run {
  if (!run) throw new ReinError(new ConnectError("the server answered without the run", Code.Internal));
  return run;
}
