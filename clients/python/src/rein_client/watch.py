"""Watching runs: the iterators of Client.watch_run and Client.watch_runs,
which open their stream again after any break, from where they were, with
backoff (client.go's Watch and WatchRuns)."""

from __future__ import annotations

import enum
import random
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Union

import grpc

from . import v1
from .errors import CancelledError, ReinError, UnavailableError, WatchGapError

if TYPE_CHECKING:
    from .client import Client

#: How many times in a row a watch tries again after an error other than
#: UNAVAILABLE with no event handed over in between (maxStuckRetries).
MAX_STUCK_RETRIES = 5

# The codes a watch reconnects after (all but UNAVAILABLE only
# MAX_STUCK_RETRIES times in a row).
_RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)


#: How long an outage goes on before on_reconnect is told of it again: it
#: is told when a watch first loses its stream after an event, and then at
#: most this often (seconds) while the watch has handed over nothing since.
RECONNECT_TELL_EVERY = 30.0


class ReconnectCause(enum.Enum):
    """Why a watch lost its stream."""

    #: No server answered, or the one that did went away (stopped,
    #: restarted, the connection dropped): UNAVAILABLE.
    UNAVAILABLE = "unavailable"
    #: The server ended a stream that never ends by itself (WatchRuns).
    STREAM_ENDED = "stream_ended"
    #: The server asked the client to wait (RESOURCE_EXHAUSTED).
    OVERLOADED = "overloaded"
    #: The server failed the call: INTERNAL, UNKNOWN, ABORTED or
    #: DEADLINE_EXCEEDED, retried MAX_STUCK_RETRIES times in a row at most.
    SERVER_ERROR = "server_error"


@dataclass(frozen=True)
class Reconnect:
    """What on_reconnect is told: a watch lost its stream and will open it
    again after ``wait`` seconds. ``str()`` of it is one line for a log."""

    #: Why the stream was lost.
    cause: ReconnectCause
    #: The server that failed (host:port).
    server: str
    #: How many times in a row the watch has failed to get a stream going
    #: since it last handed over an event (1 for the first).
    attempt: int
    #: Seconds before the next try.
    wait: float
    #: The error itself (a ReinError: code, message, details), for the detail.
    error: ReinError

    def __str__(self) -> str:
        return (
            f"watch lost its stream from {self.server} ({self.cause.value}, {self.error.code_name}); "
            f"try {self.attempt + 1} in {self.wait:.2f} s"
        )


def _cause(err: ReinError) -> ReconnectCause:
    if err.code == grpc.StatusCode.UNAVAILABLE:
        return ReconnectCause.STREAM_ENDED if isinstance(err, _StreamEnded) else ReconnectCause.UNAVAILABLE
    if err.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ReconnectCause.OVERLOADED
    return ReconnectCause.SERVER_ERROR


class _StreamEnded(UnavailableError):
    """WatchRuns' stream ended OK, which it never does by itself."""


class _Stream:
    """A watch's open call and whether it was cancelled, shared by the
    watch object and its generator (which holds this, not the watch, so that
    a watch dropped after a ``break`` is freed at once, and its stream
    closed)."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._call: Optional[grpc.Call] = None

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()

    def open(self, call: grpc.Call) -> None:
        with self._lock:
            self._call = call
        if self.cancelled.is_set():
            call.cancel()

    def closed(self, call: Optional[grpc.Call]) -> None:
        with self._lock:
            self._call = None
        if call is not None:
            call.cancel()

    def check(self, cause: Optional[BaseException] = None) -> None:
        """Raises CancelledError if the watch was cancelled."""
        if self.cancelled.is_set():
            raise CancelledError("the watch was cancelled", grpc.StatusCode.CANCELLED) from cause


class _Watch:
    """What RunWatch and RunsWatch share: iteration, cancel() and close()."""

    _gen: Iterator[Any]

    def __init__(self) -> None:
        self._stream = _Stream()

    def __iter__(self) -> "_Watch":
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def __enter__(self) -> "_Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cancel(self) -> None:
        """Ends the watch, from any thread: its stream is cancelled, a wait to
        reconnect cut short, and the iteration raises CancelledError."""
        self._stream.cancel()

    def close(self) -> None:
        """Ends the watch and closes its stream; the iteration stops
        (StopIteration). Breaking out of a for loop over the watch does the
        same once nothing refers to it any more."""
        self._stream.cancel()
        try:
            self._gen.close()
        except ValueError:  # iterated by another thread right now: cancel() did it
            pass


class RunWatch(_Watch):
    """A run's events (v1.Event), each exactly once, in order: iterate it.

    When its stream breaks it opens a new one after the last sequence it
    yielded (``after``): on the next server of the list at once while some
    were not tried, then after a pause that doubles with jitter from
    ``backoff.min`` to ``backoff.max`` (at least a RetryInfo's delay). It
    skips any event it already yielded and raises WatchGapError (DATA_LOSS)
    if the server ever skipped one. It ends when the run is terminal and
    every event was yielded; a paused run keeps it open.

    It raises what retrying cannot fix (NotFoundError,
    PermissionDeniedError, OutOfRangeError, UnauthenticatedError, …) at once;
    INTERNAL, ABORTED, RESOURCE_EXHAUSTED, UNKNOWN, DEADLINE_EXCEEDED once
    they persist past MAX_STUCK_RETRIES retries in a row with no event in
    between; UNAVAILABLE only once ``backoff.patience`` ran out, if set; and
    CancelledError after cancel().

    With ``model_output`` it also yields, between the events, the text of
    the run's model call in flight as the model writes it (v1.ModelOutput:
    ``requested``, the sequence of the call's model_requested event, then
    ``offset`` and ``text``, ``done`` once the call returned, before its
    model_returned event). A ModelOutput is not an event: it has no
    sequence and does not move ``after``. After a reconnection, or for a
    retried (``attempt`` 2) or ``resumed`` call, the server sends the call's
    text again from offset 0: start the call's text over at every offset 0.
    Without ``model_output`` it yields events only."""

    def __init__(self, client: Client, run_id: str, after: int, model_output: bool = False) -> None:
        super().__init__()
        #: The run watched.
        self.run_id = run_id
        #: Whether the watch yields v1.ModelOutput too.
        self.model_output = model_output
        self._pos = [after]
        self._gen = _watch_run(client, self._stream, run_id, self._pos, model_output)

    @property
    def after(self) -> int:
        """The sequence of the last event yielded (or the one the watch
        started after): where a new watch would resume."""
        return self._pos[0]


def _watch_run(
    c: Client, s: _Stream, run_id: str, pos: List[int], model_output: bool
) -> Iterator[Union[v1.Event, v1.ModelOutput]]:
    r = _Reconnector(c)
    while True:
        s.check()
        at = c._current
        call = None
        try:
            call = c._conns[at].stub.WatchRun(
                v1.WatchRunRequest(run_id=run_id, after_sequence=pos[0], model_output=model_output)
            )
            s.open(call)
            for resp in call:
                if resp.HasField("output"):
                    if not model_output:
                        continue  # not asked for
                    # Not an event: no sequence, the cursor stays put.
                    r.progress()
                    yield resp.output
                    continue
                if not resp.HasField("event"):
                    continue  # a message this client does not know
                ev = resp.event
                if ev.sequence <= pos[0]:
                    continue  # never twice
                if ev.sequence != pos[0] + 1:
                    raise WatchGapError(
                        f"watch run {run_id}: got sequence {ev.sequence} after {pos[0]}: the server skipped events",
                        grpc.StatusCode.DATA_LOSS,
                        server=c._conns[at].address,
                    )
                pos[0] = ev.sequence
                r.progress()
                yield ev
            c._current = at
            return
        except grpc.RpcError as e:
            s.check(e)
            err = c._fail(at, e)
        finally:
            s.closed(call)
        r.reconnect(err, s)


class RunsWatch(_Watch):
    """Status changes across the caller's runs (v1.RunChange), each once, in
    commit order: iterate it. It reconnects like RunWatch, from the cursor of
    the last change it yielded (``after_cursor``), and never ends by itself:
    break out of the loop, close() or cancel() it."""

    def __init__(self, client: Client, req: v1.WatchRunsRequest) -> None:
        super().__init__()
        self._req = req
        self._gen = _watch_runs(client, self._stream, req)

    @property
    def after_cursor(self) -> int:
        """The cursor of the last change yielded (or the one the watch
        started after)."""
        return self._req.after_cursor


def _watch_runs(c: Client, s: _Stream, req: v1.WatchRunsRequest) -> Iterator[v1.RunChange]:
    r = _Reconnector(c)
    while True:
        s.check()
        at = c._current
        call = None
        try:
            call = c._conns[at].stub.WatchRuns(req)
            s.open(call)
            for resp in call:
                ch = resp.change
                if ch.cursor <= req.after_cursor:
                    continue
                req.after_cursor = ch.cursor
                r.progress()
                yield ch
            # WatchRuns never ends by itself: a stream that ended OK was cut.
            err: ReinError = _StreamEnded(
                "the server ended the WatchRuns stream", grpc.StatusCode.UNAVAILABLE, server=c._conns[at].address
            )
            if c._current == at:
                c._current = (at + 1) % len(c._conns)
        except grpc.RpcError as e:
            s.check(e)
            err = c._fail(at, e)
        finally:
            s.closed(call)
        r.reconnect(err, s)


class _Reconnector:
    """A watch's state between reconnections: the next wait, the servers
    tried since the last wait, the tries in a row with no progress, and since
    when (client.go, reconnector)."""

    def __init__(self, c: Client) -> None:
        self._b = c._backoff
        self._servers = len(c._conns)
        self._told = c._on_reconnect
        self._wait = self._b.min
        self._stuck = 0
        self._hops = 0
        self._since: Optional[float] = None
        self._attempt = 0  # failures since the last progress
        self._told_at: Optional[float] = None  # when on_reconnect was last told, this outage

    def progress(self) -> None:
        """An event was handed over: the next failure starts afresh."""
        self._wait, self._stuck, self._hops, self._since = self._b.min, 0, 0, None
        self._attempt, self._told_at = 0, None

    def reconnect(self, err: ReinError, s: _Stream) -> None:
        """Returns when the watch should open its stream again: at once (an
        UNAVAILABLE, with servers of the list not yet tried), or after a
        jittered pause; raises err when retrying cannot fix it, when it
        persisted past MAX_STUCK_RETRIES tries in a row or past the patience
        with no progress, and CancelledError when the watch was cancelled."""
        s.check(err)
        if err.code not in _RETRYABLE:
            raise err
        self._attempt += 1
        if err.code != grpc.StatusCode.UNAVAILABLE:
            self._stuck += 1
            if self._stuck > MAX_STUCK_RETRIES:
                raise err
        if self._since is None:
            self._since = time.monotonic()
        if err.code == grpc.StatusCode.UNAVAILABLE and err.retry_delay is None:
            self._hops += 1
            if self._hops < self._servers:
                return  # the next server, at once
        self._hops = 0
        pause = _jitter(self._wait)
        if err.retry_delay is not None:
            pause = max(pause, err.retry_delay)
        p = self._b.patience
        if p is not None and time.monotonic() - self._since + pause > p:
            raise err
        self._tell(err, pause)
        s.cancelled.wait(pause)
        s.check(err)
        self._wait = min(2 * self._wait, self._b.max)

    def _tell(self, err: ReinError, pause: float) -> None:
        """Tells on_reconnect of the outage: at its first pause, then at
        most every RECONNECT_TELL_EVERY seconds while it lasts."""
        if self._told is None:
            return
        now = time.monotonic()
        if self._told_at is not None and now - self._told_at < RECONNECT_TELL_EVERY:
            return
        self._told_at = now
        self._told(Reconnect(_cause(err), err.server or "", self._attempt, pause, err))

def _jitter(wait: float) -> float:
    """A pause in [wait/2, wait]."""
    return wait / 2 + random.uniform(0, wait / 2)
