"""The errors a call to rein raises: one class per gRPC code a caller acts on
(docs/api.md#errors), each carrying the server's code and message.

Every error is a :class:`ReinError`: ``err.code`` is the ``grpc.StatusCode``,
``err.code_name`` its name (``"NOT_FOUND"``), ``err.message`` the server's
message as it sent it, ``err.server`` the address that answered so (or could
not be reached), ``err.details`` the ``google.rpc.Status`` details
(``google.protobuf.Any``), ``err.retry_delay`` the delay of a
``google.rpc.RetryInfo`` detail in seconds (None without one). The
``grpc.RpcError`` it came from is ``err.__cause__``.
"""

from __future__ import annotations

from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

import grpc
from google.protobuf import any_pb2

from ._gen.rein_client_rpc_pb2 import BadRequest, RetryInfo, Status

__all__ = [
    "ReinError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "NotFoundError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "FailedPreconditionError",
    "ConflictError",
    "UnavailableError",
    "ResourceExhaustedError",
    "DataLossError",
    "InternalError",
    "DeadlineExceededError",
    "CancelledError",
    "WatchGapError",
    "PlaintextTokenError",
    "FieldViolation",
    "from_rpc_error",
]

_DETAILS_KEY = "grpc-status-details-bin"
_RETRY_INFO = "google.rpc.RetryInfo"
_BAD_REQUEST = "google.rpc.BadRequest"


class FieldViolation(NamedTuple):
    """One field of a google.rpc.BadRequest detail."""

    field: str
    description: str


class ReinError(Exception):
    """A call to rein failed: the gRPC code and the server's message."""

    def __init__(
        self,
        message: str,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        details: Iterable[any_pb2.Any] = (),
        server: Optional[str] = None,
        metadata: Sequence[Tuple[str, object]] = (),
    ) -> None:
        super().__init__(message)
        #: The server's message, without the code in front.
        self.message = message
        #: The grpc.StatusCode.
        self.code = code
        #: The details of the google.rpc.Status the server sent.
        self.details: Tuple[any_pb2.Any, ...] = tuple(details)
        #: The server that answered so, or could not be reached, when known.
        self.server = server
        #: The trailing metadata of the call.
        self.metadata: Tuple[Tuple[str, object], ...] = tuple(metadata)

    @property
    def code_name(self) -> str:
        """The code's gRPC name: "NOT_FOUND", "FAILED_PRECONDITION", …"""
        return self.code.name

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"

    @property
    def retry_delay(self) -> Optional[float]:
        """The delay of the error's google.rpc.RetryInfo in seconds (at least
        0), or None when it carries none."""
        for d in self.details:
            if _type_name(d) == _RETRY_INFO:
                try:
                    ri = RetryInfo.FromString(d.value)
                except Exception:  # a detail that does not decode names no delay
                    continue
                return max(ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9, 0.0)
        return None

    @property
    def field_violations(self) -> List[FieldViolation]:
        """The google.rpc.BadRequest details: the fields of the request that
        are wrong, and why."""
        out = []
        for d in self.details:
            if _type_name(d) == _BAD_REQUEST:
                try:
                    br = BadRequest.FromString(d.value)
                except Exception:  # a detail that does not decode is left out
                    continue
                out.extend(FieldViolation(v.field, v.description) for v in br.field_violations)
        return out


class InvalidArgumentError(ReinError):
    """INVALID_ARGUMENT: a bad request; ``field_violations`` names the fields."""


class OutOfRangeError(ReinError):
    """OUT_OF_RANGE: a watch from beyond the run's head."""


class NotFoundError(ReinError):
    """NOT_FOUND: an unknown run, or another tenant's (the same answer)."""


class UnauthenticatedError(ReinError):
    """UNAUTHENTICATED: no token, or one the server does not know."""


class PermissionDeniedError(ReinError):
    """PERMISSION_DENIED: a role that may not, or a policy that forbids."""


class FailedPreconditionError(ReinError):
    """FAILED_PRECONDITION: the run's state does not allow the call (a
    terminal run, a proposal no longer pending, a paused run steered, …)."""


class ConflictError(ReinError):
    """ABORTED (a stale version, or the run's lease taken by another server:
    reload and retry) or ALREADY_EXISTS (an import of a run, or a request ID,
    already stored); ``code`` says which."""


class UnavailableError(ReinError):
    """UNAVAILABLE: no server of the list could be reached, or it is shutting
    down. A call whose connection ended after it was sent may or may not have
    been applied."""


class ResourceExhaustedError(ReinError):
    """RESOURCE_EXHAUSTED: over the principal's rate or a full disk (with
    ``retry_delay``, seconds, from the server's RetryInfo), or an oversize
    request (``retry_delay`` None: waiting does not fix it)."""


class DataLossError(ReinError):
    """DATA_LOSS: a stored value of the run is damaged."""


class InternalError(ReinError):
    """INTERNAL or UNKNOWN: the server's log has the details."""


class DeadlineExceededError(ReinError, TimeoutError):
    """DEADLINE_EXCEEDED: the call's timeout passed."""


class CancelledError(ReinError):
    """CANCELLED: the call was cancelled (a watch's ``cancel()``)."""


class WatchGapError(DataLossError):
    """A watch received an event whose sequence is not the next one: the
    server skipped events. Never expected; raised rather than hidden."""


class PlaintextTokenError(ValueError):
    """connect() refused to send a bearer token without TLS to an address
    that is not loopback."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: ConflictError,
    grpc.StatusCode.ALREADY_EXISTS: ConflictError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNKNOWN: InternalError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
}


def error_class(code: grpc.StatusCode) -> type:
    """The ReinError subclass for a code."""
    return _BY_CODE.get(code, ReinError)


def from_rpc_error(err: grpc.RpcError, server: Optional[str] = None) -> ReinError:
    """The typed error for a grpc.RpcError (a grpc.Call), with the details of
    the google.rpc.Status the server sent (the grpc-status-details-bin
    trailer); its __cause__ is err."""
    if isinstance(err, ReinError):
        return err
    code = err.code() if callable(getattr(err, "code", None)) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    message = err.details() if callable(getattr(err, "details", None)) else None
    if message is None:
        message = str(err)
    trailers = err.trailing_metadata() if callable(getattr(err, "trailing_metadata", None)) else None
    details: Tuple[any_pb2.Any, ...] = ()
    for key, value in trailers or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            try:
                details = tuple(Status.FromString(value).details)
            except Exception:  # a status that does not decode has no details
                details = ()
    out = error_class(code)(message, code, details, server, tuple(trailers or ()))
    out.__cause__ = err
    return out


def _type_name(a: any_pb2.Any) -> str:
    return a.type_url.rsplit("/", 1)[-1]
