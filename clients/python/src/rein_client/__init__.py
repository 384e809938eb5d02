"""The Python client of rein's RunService, over gRPC.

``rein_client.v1`` holds the typed messages and stubs generated from
proto/rein/v1 (``v1.TaskContract``, ``v1.Event``, ``v1.RUN_STATUS_COMPLETED``,
…); :func:`connect` makes a :class:`Client`, a thin layer over the stub that
does what the Go client does: several servers tried in order, a bearer token,
TLS and mTLS, typed errors (:mod:`rein_client.errors`), the server's
RetryInfo honoured, and :meth:`Client.watch_run`, an iterator that resumes
after any disconnect with no gap and no duplicate.
"""

from . import errors, v1
from .client import (
    DEFAULT_BACKOFF_MAX,
    DEFAULT_BACKOFF_MIN,
    MAX_RETRY_INFO_ATTEMPTS,
    MAX_STUCK_RETRIES,
    RECONNECT_TELL_EVERY,
    Backoff,
    Client,
    RunsWatch,
    RunWatch,
    StartRunResult,
    SteerResult,
    approvals_wanted,
    PauseEnd,
    Reconnect,
    ReconnectCause,
    connect,
    pause_ends,
    pending_proposal,
    waits_for_person,
)
from .errors import (
    CancelledError,
    ConflictError,
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    PlaintextTokenError,
    ReinError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    WatchGapError,
    from_rpc_error,
)

__version__ = "0.1.0"

__all__ = [
    "errors",
    "v1",
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_BACKOFF_MIN",
    "MAX_RETRY_INFO_ATTEMPTS",
    "MAX_STUCK_RETRIES",
    "RECONNECT_TELL_EVERY",
    "Backoff",
    "Client",
    "RunsWatch",
    "RunWatch",
    "StartRunResult",
    "SteerResult",
    "approvals_wanted",
    "connect",
    "PauseEnd",
    "Reconnect",
    "ReconnectCause",
    "pause_ends",
    "pending_proposal",
    "waits_for_person",
    "CancelledError",
    "ConflictError",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "PlaintextTokenError",
    "ReinError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "WatchGapError",
    "from_rpc_error",
]
