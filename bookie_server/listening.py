"""Where a bookie listens: the gRPC server's options, the address, a probe that the port is free before
anything else is opened, and the real bind. Each failure names the flag to change (``--host``,
``--port``) and is an ``InvalidConfigurationError``."""
from __future__ import annotations

import errno
import socket

import grpc

from bookie_server.limits import GRPC_MESSAGE_MARGIN, MAX_READ_BYTES, grpc_max_message_bytes
from pyspark_ledger.errors import InvalidConfigurationError


def grpc_server_options(max_entry_size: int, max_batch_bytes: int) -> list[tuple[str, int]]:
    """The gRPC server's options: a receive limit near one legitimate batch (``limits.grpc_max_message_bytes``);
    answers (range reads stop near 16 MiB, one entry at least) may be as large as the largest entry."""
    receive = grpc_max_message_bytes(max_entry_size, max_batch_bytes)
    send = max(receive, MAX_READ_BYTES + max_entry_size + GRPC_MESSAGE_MARGIN)
    return [
        ("grpc.max_receive_message_length", receive),
        ("grpc.max_send_message_length", send),
        ("grpc.so_reuseport", 0),  # a port in use must fail the start, not be shared
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
    ]


def listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_port_free(host: str, port: int) -> None:
    """Fail at once, naming the port, if ``host:port`` cannot be bound (in use, or the address is not local).

    A probe: the socket is closed again, and gRPC binds for real later. It runs before anything else so that
    a port clash is the first and only complaint, not a cookie or data dir one (issue 12, part 6)."""
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise InvalidConfigurationError(f"cannot listen on {listen_address(host, port)}: host {host!r} does not "
                                        f"resolve ({exc}); pick another --host") from exc
    failures = []
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no clash
            try:
                probe.bind(address)
            except OSError as exc:
                failures.append(exc)
                if exc.errno == errno.EADDRINUSE:
                    break
    if failures and (failures[-1].errno == errno.EADDRINUSE or len(failures) == len(addresses)):
        exc = failures[-1]
        raise InvalidConfigurationError(
            f"cannot listen on {listen_address(host, port)}: port {port} is in use or the address is not "
            f"local ({exc.strerror or exc}); stop what holds port {port} or pick another --port or --host "
            "(nothing was changed in the data dir or the metadata store)") from exc


def bind_port(server: grpc.Server, address: str, port: int, tls) -> None:
    """Bind ``server`` to ``address`` (plaintext, or TLS with ``tls``'s credentials: bad files fail here, named);
    a port other than ``port`` bound (or none) is refused naming the flags."""
    credentials = tls.server_credentials() if tls is not None else None
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        bound = 0
        cause: Exception | None = exc
    else:
        cause = None
    if bound != port:
        raise InvalidConfigurationError(
            f"cannot listen on {address}: the port is in use or the address is not local; "
            "pick another --port or --host") from cause
