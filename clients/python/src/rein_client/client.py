"""The client of a rein server, as thin as the Go client (client/client.go,
client/retry.go): the generated RunService stub over gRPC, a bearer token,
TLS and mTLS, several servers tried in order (their channels: _channel.py),
typed errors, the server's RetryInfo honoured, and watches that survive
dropped connections and server restarts (watch.py)."""

from __future__ import annotations

import datetime
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

import grpc
from google.protobuf import duration_pb2, struct_pb2

from . import v1
from ._channel import Conn, dial
from .watch import MAX_STUCK_RETRIES, RECONNECT_TELL_EVERY, Reconnect, ReconnectCause, RunsWatch, RunWatch, _jitter
from .errors import (
    InternalError,
    ReinError,
    ResourceExhaustedError,
    UnavailableError,
    from_rpc_error,
)

__all__ = [
    "Backoff",
    "Client",
    "RunWatch",
    "RunsWatch",
    "StartRunResult",
    "SteerResult",
    "connect",
    "pending_proposal",
    "waits_for_person",
    "approvals_wanted",
    "DEFAULT_BACKOFF_MIN",
    "DEFAULT_BACKOFF_MAX",
    "MAX_RETRY_INFO_ATTEMPTS",
    "MAX_STUCK_RETRIES",
]

T = TypeVar("T")

#: The default Backoff bounds, in seconds (client.DefaultBackoffMin/Max).
DEFAULT_BACKOFF_MIN = 0.05
DEFAULT_BACKOFF_MAX = 5.0

#: How many times a unary call is sent while the server keeps answering
#: RESOURCE_EXHAUSTED with a RetryInfo (client.MaxRetryInfoAttempts).
MAX_RETRY_INFO_ATTEMPTS = 4


@dataclass(frozen=True)
class Backoff:
    """The waits between a watch's reconnections and retry()'s tries, in
    seconds: the first is about ``min``, each next one doubles (with jitter)
    up to ``max``. ``patience``, when set, is how long a watch reconnecting
    with no event handed over, and retry() trying servers that are
    unavailable, go on before they raise the last error; None: for ever (a
    watch until it is cancelled)."""

    min: float = DEFAULT_BACKOFF_MIN
    max: float = DEFAULT_BACKOFF_MAX
    patience: Optional[float] = None


@dataclass(frozen=True)
class StartRunResult:
    """start_run's answer."""

    #: The run as it stands after the call.
    run: v1.Run
    #: False when request_id named a run that already existed.
    created: bool
    #: The request ID the run was started with: send it again to retry.
    request_id: str
    #: Sentences about the contract that did not stop the run but may
    #: surprise its caller, such as a proposal TTL that outlives the run's
    #: deadline.
    warnings: Tuple[str, ...] = ()


@dataclass(frozen=True)
class SteerResult:
    """steer's answer."""

    run: v1.Run
    #: False when request_id was already recorded: nothing was added.
    created: bool
    request_id: str


# StatusChanged's field "from" is a Python keyword: ev.status_changed.from_
# reads it (getattr(ev.status_changed, "from") does too). It is the only
# rein.v1 field whose name is a keyword.
v1.StatusChanged.from_ = property(lambda self: getattr(self, "from"), doc="The status before the change (the field named from).")  # type: ignore[attr-defined]

ProposalRef = Any  # anything with .proposal_id and .hash: a v1.Proposal


def pending_proposal(run: Optional[v1.Run]) -> Optional[v1.Proposal]:
    """The proposal a run waits on, or None."""
    if run is None or run.pending.WhichOneof("action") != "proposal":
        return None
    return run.pending.proposal


_PAUSED = (v1.RUN_STATUS_NEEDS_APPROVAL, v1.RUN_STATUS_NEEDS_INPUT, v1.RUN_STATUS_NEEDS_BUDGET)


def waits_for_person(run: Optional[v1.Run]) -> bool:
    """Whether a run waits for a person: paused with an action pending (a
    proposal short of its approvals, a question, a budget reached) that only
    a person's decision moves on. A loop that follows a run stops there: an
    approval that is not the last a write needs (a grant's approvals of 2
    or more) answers with a run that still waits, for another approver, and
    nothing moves it until one approves."""
    return run is not None and run.status in _PAUSED and run.pending.WhichOneof("action") is not None


def approvals_wanted(run: Optional[v1.Run]) -> int:
    """How many more approvals the proposal a run waits on needs (0 when it
    waits on none). Neither the run's starter (run.principal) nor one who
    approved it (approved_by) may give them."""
    p = pending_proposal(run) if waits_for_person(run) else None
    if p is None:
        return 0
    return max(p.approvals, 1) - len(p.approved_by)


class PauseEnd(NamedTuple):
    """When a pause ends if no one acts, and what ends it."""

    #: When, as an aware datetime in UTC.
    at: datetime.datetime
    #: "proposal_ttl" (the proposal expires), "run_deadline" (the run's
    #: deadline passes first; the run ends budget_exhausted) or "raise_ttl"
    #: (a budget pause expires).
    by: str


def pause_ends(run: Optional[v1.Run]) -> Optional[PauseEnd]:
    """When the pause a run waits in ends, as the server derives it
    (run.pending.ends_at, ends_by): the earlier of the proposal's expiry and
    the run's deadline. None when the run waits for no person or nothing
    ends its pause."""
    if run is None or not waits_for_person(run) or not run.pending.HasField("ends_at"):
        return None
    return PauseEnd(run.pending.ends_at.ToDatetime(tzinfo=datetime.timezone.utc), run.pending.ends_by)


def connect(
    servers: Union[str, Sequence[str]],
    *,
    token: Optional[str] = None,
    ca_file: Optional[str] = None,
    cert_file: Optional[str] = None,
    key_file: Optional[str] = None,
    system_roots: bool = False,
    server_name: Optional[str] = None,
    insecure_token: bool = False,
    backoff: Optional[Backoff] = None,
    on_reconnect: Optional[Callable[[Reconnect], None]] = None,
    options: Sequence[tuple] = (),
) -> "Client":
    """A client of the rein servers ``servers`` ("host:port", a list of them,
    or "host:port,host:port"), sharing one store: a call goes to the one that
    answered last and, while it is UNAVAILABLE, to the next ones in order. No
    connection is made until the first call.

    ``token`` is sent as "authorization: Bearer TOKEN" on every call; without
    TLS it goes only to loopback addresses unless ``insecure_token`` is set
    (else :class:`PlaintextTokenError`). ``ca_file`` (PEM) verifies the
    servers' certificates and turns TLS on, as does ``system_roots`` (gRPC's
    default roots); ``cert_file`` and ``key_file`` are the client's
    certificate for mTLS (``rein serve --client-ca``); ``server_name``
    overrides the name the certificates are verified under. ``backoff`` bounds
    the waits of watches and retry(); ``on_reconnect(reconnect)`` is told when
    a watch lost its stream and will open it again, with a :class:`Reconnect`
    (its ``cause``, ``server``, ``attempt``, ``wait`` and ``error``): once
    an outage, when its first pause begins, and then at most every
    RECONNECT_TELL_EVERY seconds while it lasts. ``options`` are added to
    each gRPC channel's."""
    return Client(
        servers,
        token=token,
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        system_roots=system_roots,
        server_name=server_name,
        insecure_token=insecure_token,
        backoff=backoff,
        on_reconnect=on_reconnect,
        options=options,
    )


class Client:
    """A client of one or several rein servers; see :func:`connect`. Safe to
    use from several threads."""

    def __init__(
        self,
        servers: Union[str, Sequence[str]],
        *,
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
        system_roots: bool = False,
        server_name: Optional[str] = None,
        insecure_token: bool = False,
        backoff: Optional[Backoff] = None,
        on_reconnect: Optional[Callable[[Reconnect], None]] = None,
        options: Sequence[tuple] = (),
    ) -> None:
        b = backoff or Backoff()
        self._backoff = Backoff(
            min=b.min if b.min and b.min > 0 else DEFAULT_BACKOFF_MIN,
            max=b.max if b.max and b.max > 0 else DEFAULT_BACKOFF_MAX,
            patience=b.patience if b.patience and b.patience > 0 else None,
        )
        self._on_reconnect = on_reconnect
        self._conns: List[Conn] = dial(
            servers,
            token=token,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            system_roots=system_roots,
            server_name=server_name,
            insecure_token=insecure_token,
            backoff=self._backoff,
            options=options,
        )
        # The server that answered last, as an index of _conns.
        self._current = 0

    # -- the connection ---------------------------------------------------

    @property
    def servers(self) -> tuple:
        """The servers, in the order they are tried."""
        return tuple(c.address for c in self._conns)

    @property
    def backoff(self) -> Backoff:
        """The client's Backoff, its defaults filled in."""
        return self._backoff

    @property
    def runs(self) -> v1.RunServiceStub:
        """The generated RunService stub of the server that answered last, for
        the RPCs not wrapped here (ListEvents, ForkRun, GetBlobs, ImportRun,
        GetServerInfo, …); it carries the token, fails over to no other
        server, and raises grpc.RpcError (errors.from_rpc_error types it)."""
        return self._conns[self._current].stub

    def close(self) -> None:
        """Closes every connection; calls in flight end."""
        for c in self._conns:
            c.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------

    def start_run(
        self, contract: v1.TaskContract, *, request_id: Optional[str] = None, timeout: Optional[float] = None
    ) -> StartRunResult:
        """Starts a run from a contract under a request ID (generated when
        absent): the same request ID returns the same run (created False),
        never a second, so a start is safe to send again."""
        rid = request_id or f"py-{uuid.uuid4()}"
        resp = self._unary("StartRun", v1.StartRunRequest(request_id=rid, contract=contract), timeout)
        return StartRunResult(_must_run(resp), resp.created, rid, tuple(resp.warnings))

    def get_run(self, run_id: str, *, timeout: Optional[float] = None) -> v1.Run:
        """A run's current state."""
        return _must_run(self._unary("GetRun", v1.GetRunRequest(run_id=run_id), timeout))

    def list_runs(
        self,
        *,
        statuses: Iterable[int] = (),
        labels: Optional[Mapping[str, str]] = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: Optional[float] = None,
        **fields: Any,
    ) -> v1.ListRunsResponse:
        """One page of runs, newest first (more ListRunsRequest fields by
        keyword: trace_id, parent_run_id); pass next_page_token as page_token
        for the next."""
        req = v1.ListRunsRequest(
            statuses=list(statuses), labels=dict(labels or {}), page_size=page_size, page_token=page_token, **fields
        )
        return self._unary("ListRuns", req, timeout)

    def approve(
        self, run_id: str, proposal: ProposalRef, *, reason: str = "", timeout: Optional[float] = None
    ) -> v1.Run:
        """Approves the pending proposal (its ID and the hash the reviewer
        saw: a v1.Proposal is one): the write is committed once and the run
        goes on."""
        return self._decide(run_id, proposal, v1.APPROVAL_VERDICT_APPROVE, reason, False, None, timeout)

    def deny(
        self,
        run_id: str,
        proposal: ProposalRef,
        *,
        reason: str = "",
        end_run: bool = False,
        timeout: Optional[float] = None,
    ) -> v1.Run:
        """Rejects the pending proposal: the reason goes to the model, or,
        with end_run, the run ends as denied."""
        return self._decide(run_id, proposal, v1.APPROVAL_VERDICT_REJECT, reason, end_run, None, timeout)

    def revise(
        self,
        run_id: str,
        proposal: ProposalRef,
        arguments: Union[Mapping[str, Any], struct_pb2.Struct],
        *,
        reason: str = "",
        timeout: Optional[float] = None,
    ) -> v1.Run:
        """Replaces the pending proposal's arguments (in full): approval with
        edited arguments. The tool previews the revised write, which waits
        for approval under a new proposal ID and hash
        (pending_proposal(run))."""
        args = arguments
        if not isinstance(args, struct_pb2.Struct):
            args = struct_pb2.Struct()
            args.update(arguments)
        return self._decide(run_id, proposal, v1.APPROVAL_VERDICT_REVISE, reason, False, args, timeout)

    def _decide(self, run_id, proposal, verdict, reason, end_run, args, timeout) -> v1.Run:
        req = v1.DecideApprovalRequest(
            run_id=run_id,
            proposal_id=proposal.proposal_id,
            proposal_hash=proposal.hash,
            verdict=verdict,
            reason=reason,
            end_run=end_run,
        )
        if args is not None:
            req.arguments.CopyFrom(args)
        return _must_run(self._unary("DecideApproval", req, timeout))

    def input(self, run_id: str, text: str, *, timeout: Optional[float] = None) -> v1.Run:
        """Answers a run's question (needs_input); the run goes on."""
        return _must_run(self._unary("ProvideInput", v1.ProvideInputRequest(run_id=run_id, text=text), timeout))

    def cancel(self, run_id: str, *, reason: str = "", timeout: Optional[float] = None) -> v1.Run:
        """Cancels a running or paused run."""
        return _must_run(self._unary("CancelRun", v1.CancelRunRequest(run_id=run_id, reason=reason), timeout))

    def steer(
        self, run_id: str, text: str, *, request_id: Optional[str] = None, timeout: Optional[float] = None
    ) -> SteerResult:
        """Sends a running run a message, which its model reads with its next
        call; the same request_id (generated when absent) records nothing
        again (created False). A paused run is FailedPrecondition naming the
        call that answers it."""
        rid = request_id or f"py-{uuid.uuid4()}"
        resp = self._unary("SteerRun", v1.SteerRunRequest(run_id=run_id, text=text, request_id=rid), timeout)
        return SteerResult(_must_run(resp), resp.created, rid)

    def raise_budget(
        self,
        run_id: str,
        *,
        add_steps: int = 0,
        add_tokens: int = 0,
        add_tool_calls: int = 0,
        add_cost_usd: float = 0.0,
        extend_deadline: Union[None, float, datetime.timedelta, duration_pb2.Duration] = None,
        reason: str = "",
        timeout: Optional[float] = None,
    ) -> v1.Run:
        """Raises the budget of a run paused on it (needs_budget) and carries
        it on; extend_deadline in seconds, a timedelta or a Duration. A raise
        that leaves the limit reached is FailedPrecondition."""
        req = v1.RaiseBudgetRequest(
            run_id=run_id,
            add_steps=add_steps,
            add_tokens=add_tokens,
            add_tool_calls=add_tool_calls,
            add_cost_usd=add_cost_usd,
            reason=reason,
        )
        if isinstance(extend_deadline, duration_pb2.Duration):
            req.extend_deadline.CopyFrom(extend_deadline)
        elif isinstance(extend_deadline, datetime.timedelta):
            req.extend_deadline.FromTimedelta(extend_deadline)
        elif extend_deadline is not None:
            req.extend_deadline.FromNanoseconds(int(extend_deadline * 1e9))
        return _must_run(self._unary("RaiseBudget", req, timeout))

    # -- watches ----------------------------------------------------------

    def watch_run(
        self,
        run_id: str,
        *,
        from_seq: Optional[int] = None,
        after_sequence: Optional[int] = None,
        model_output: bool = False,
    ) -> "RunWatch":
        """An iterator of a run's events, each exactly once, in order
        (1, 2, 3, … from ``from_seq``, default 1, or after
        ``after_sequence``), history then live; it ends when the run is
        terminal and every event was yielded. When its stream breaks (a
        dropped connection, a server killed or restarted) it opens a new one
        after the last sequence it yielded, on the next server of the list,
        with backoff: no gap, no duplicate. With ``model_output`` it yields
        both v1.Event and v1.ModelOutput (the text of the model call in
        flight, as it is written), in the order the server sent them;
        without it, v1.Event only. See :class:`RunWatch`."""
        if from_seq is not None and after_sequence is not None:
            raise ValueError("watch_run: give from_seq or after_sequence, not both")
        after = after_sequence if after_sequence is not None else (from_seq - 1 if from_seq is not None else 0)
        return RunWatch(self, run_id, max(after, 0), model_output)

    def watch_runs(
        self,
        *,
        statuses: Iterable[int] = (),
        labels: Optional[Mapping[str, str]] = None,
        after_cursor: int = 0,
    ) -> "RunsWatch":
        """An iterator of status changes (v1.RunChange) across the caller's
        runs, each once, in commit order, after ``after_cursor``; it resumes
        from its cursor like watch_run and never ends by itself: break out of
        the loop, or cancel() it. See :class:`RunsWatch`."""
        req = v1.WatchRunsRequest(statuses=list(statuses), labels=dict(labels or {}), after_cursor=after_cursor)
        return RunsWatch(self, req)

    # -- retries ----------------------------------------------------------

    def retry(self, fn: Callable[[], T], *, cancel: Optional[threading.Event] = None) -> T:
        """Calls fn until it returns or raises anything but UNAVAILABLE,
        waiting between tries as the Backoff says (doubling, with jitter, at
        least a RetryInfo's delay), for as long as ``backoff.patience``
        (counted from the first UNAVAILABLE) and ``cancel`` allow; given up,
        it raises the last UnavailableError. fn must be safe to repeat: a call
        whose answer was lost may have been applied (a start_run with its
        request_id, a read)."""
        wait = self._backoff.min
        since: Optional[float] = None
        stop = cancel or threading.Event()
        while True:
            try:
                return fn()
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            except UnavailableError as e:
                err = e
            if not isinstance(err, UnavailableError):
                raise err
            if since is None:
                since = time.monotonic()
            pause = _jitter(wait)
            if err.retry_delay is not None:
                pause = max(pause, err.retry_delay)
            p = self._backoff.patience
            if p is not None and time.monotonic() - since + pause > p:
                raise err
            if stop.wait(pause):
                raise err
            wait = min(2 * wait, self._backoff.max)

    # -- the machinery ----------------------------------------------------

    def _unary(self, method: str, request: Any, timeout: Optional[float]) -> Any:
        """Sends a unary call to the server that answered last, and on to the
        next ones, in order, while they are UNAVAILABLE; a RESOURCE_EXHAUSTED
        with a RetryInfo is sent again after its delay (plus up to 10%),
        MAX_RETRY_INFO_ATTEMPTS times at most, never past the timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._failover(method, request, deadline)
            except ResourceExhaustedError as err:
                delay = err.retry_delay
                if attempt >= MAX_RETRY_INFO_ATTEMPTS or delay is None:
                    raise
                delay += random.uniform(0, delay / 10)
                if deadline is not None and deadline - time.monotonic() < delay:
                    raise
            time.sleep(delay)  # the server's delay

    def _failover(self, method: str, request: Any, deadline: Optional[float]) -> Any:
        """The answer of the first server that is not UNAVAILABLE, from the
        one that answered last; else the last UnavailableError."""
        n = len(self._conns)
        start = self._current
        last: Optional[ReinError] = None
        for i in range(n):
            at = (start + i) % n
            conn = self._conns[at]
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                resp = getattr(conn.stub, method)(request, timeout=timeout)
            except grpc.RpcError as e:
                err = from_rpc_error(e, conn.address)
                if not isinstance(err, UnavailableError):
                    raise err from e
                last = err
                continue
            self._current = at
            return resp
        assert last is not None
        raise last

    def _fail(self, at: int, e: grpc.RpcError) -> ReinError:
        """The ReinError of a stream that ended on server at; moves on to the
        next server when that one is UNAVAILABLE."""
        err = from_rpc_error(e, self._conns[at].address)
        if isinstance(err, UnavailableError) and self._current == at:
            self._current = (at + 1) % len(self._conns)
        return err


def _must_run(resp: Any) -> v1.Run:
    if not resp.HasField("run"):
        raise InternalError("the server answered without the run", grpc.StatusCode.INTERNAL)
    return resp.run
