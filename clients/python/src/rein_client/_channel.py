"""The channels of a client's servers: one gRPC channel per server, the
bearer token, TLS and mTLS, and the checks made before any connection (the
token refused in plaintext to a host that is not loopback)."""

from __future__ import annotations

import collections
import ipaddress
from typing import TYPE_CHECKING, List, Optional, Sequence, Union

import grpc

from . import v1
from .errors import PlaintextTokenError

if TYPE_CHECKING:
    from .client import Backoff


class Conn:
    """One server: its channel and stub."""

    def __init__(self, address: str, channel: grpc.Channel) -> None:
        self.address = address
        self.channel = channel
        self.stub = v1.RunServiceStub(channel)


def dial(
    servers: Union[str, Sequence[str]],
    *,
    token: Optional[str],
    ca_file: Optional[str],
    cert_file: Optional[str],
    key_file: Optional[str],
    system_roots: bool,
    server_name: Optional[str],
    insecure_token: bool,
    backoff: Backoff,
    options: Sequence[tuple],
) -> List[Conn]:
    """The channels of ``servers``, as :func:`rein_client.connect` takes
    them; ``backoff`` (its defaults filled in) bounds gRPC's own
    reconnection waits. No connection is made yet."""
    addrs = [s.strip() for s in (servers.split(",") if isinstance(servers, str) else servers)]
    if not addrs:
        raise ValueError("connect: no servers; give 'host:port' or a list of them")
    for a in addrs:
        if not a:
            raise ValueError(f"connect: an empty address in {servers!r}; give host:port[,host:port…]")
        if a.startswith(("http://", "https://")):
            raise ValueError(f"connect: server {a!r}: give host:port (gRPC), not a URL")
    tls = bool(ca_file or cert_file or key_file or system_roots)
    if bool(cert_file) != bool(key_file):
        raise ValueError("connect: give both cert_file and key_file for mTLS, or neither")
    if token and not tls and not insecure_token:
        for a in addrs:
            if not _loopback(a):
                raise PlaintextTokenError(
                    f"refusing to send the bearer token in plaintext to {a}, which is not a loopback "
                    "address: use TLS (ca_file or system_roots), or set insecure_token on a network you trust"
                )
    creds = None
    if tls:
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(ca_file),
            private_key=_read(key_file),
            certificate_chain=_read(cert_file),
        )
    min_ms = max(1, int(backoff.min * 1000))
    opts = [
        # Reconnect to a server that came back as soon as the watch's own
        # backoff would. gRPC's defaults wait 1 s growing to 120 s between
        # connection attempts, and resolve a name again at most every
        # 30 s; with them (grpcio 1.51) a channel found a server that was
        # restarted within a second only 5 to 10 s later, and with the
        # reconnection waits alone shortened no sooner; with the name
        # resolved again as often as the watch retries, at once.
        ("grpc.initial_reconnect_backoff_ms", min_ms),
        ("grpc.max_reconnect_backoff_ms", max(1, int(backoff.max * 1000))),
        ("grpc.dns_min_time_between_resolutions_ms", min_ms),
        # Pings find a server gone silent under an open watch; rein's
        # keepalive policy allows one every 10 s.
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 15_000),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    opts.extend(options)
    interceptors = [_Bearer("Bearer " + token)] if token else []
    conns: List[Conn] = []
    for a in addrs:
        ch = grpc.secure_channel(a, creds, options=opts) if creds else grpc.insecure_channel(a, options=opts)
        if interceptors:
            ch = grpc.intercept_channel(ch, *interceptors)
        conns.append(Conn(a, ch))
    return conns


_CallDetails = collections.namedtuple(
    "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
)


class _ClientCallDetails(_CallDetails, grpc.ClientCallDetails):
    pass


class _Bearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds "authorization: Bearer TOKEN" to every call. (gRPC's call
    credentials would need TLS; a token also goes to loopback in plaintext,
    as the Go client's does.)"""

    def __init__(self, value: str) -> None:
        self._md = ("authorization", value)

    def _details(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        md = [m for m in (d.metadata or ()) if m[0] != "authorization"]
        md.append(self._md)
        return _ClientCallDetails(
            d.method,
            d.timeout,
            md,
            d.credentials,
            getattr(d, "wait_for_ready", None),
            getattr(d, "compression", None),
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


def _read(path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def _loopback(address: str) -> bool:
    """Whether host:port is this machine: "localhost" or a loopback IP.
    Names are not resolved."""
    for scheme in ("dns:///", "passthrough:///", "ipv4:", "ipv6:"):
        if address.startswith(scheme):
            address = address[len(scheme) :]
    if address.startswith("unix:") or address.startswith("unix-abstract:"):
        return True
    host = address.rpartition(":")[0] or address
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
