"""The client side of the bookie wire protocol: one gRPC channel to one bookie.

``BookieClient`` offers add streams (``add_stream()``), range/fence reads,
LAC reads and long polls, and bookie info. Statuses the bookie decided are
returned as values (``ReadResult.status`` ...): the replication client decides
on them. Transport failures raise BookieError; BookieUnavailableError for an
unreachable bookie or a deadline (an unknown outcome).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from pyspark_ledger.client.add_stream import DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_INFLIGHT, AddStream
from pyspark_ledger.client.rpc_errors import BookieStatus, as_status, translate_rpc_error
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc

DEFAULT_TIMEOUT_S = 30.0
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    ("grpc.enable_retries", 0),
)


@dataclass(frozen=True, slots=True)
class ReadResult:
    status: BookieStatus
    message: str
    entries: tuple[tuple[int, bytes], ...]   # (entry_id, body) in entry order
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool

    @property
    def ok(self) -> bool:
        return self.status == BookieStatus.OK


@dataclass(frozen=True, slots=True)
class LacResult:
    status: BookieStatus
    message: str
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool


@dataclass(frozen=True, slots=True)
class BookieInfo:
    status: BookieStatus
    bookie_id: str
    free_bytes: int
    total_bytes: int
    read_only: bool
    version: str
    max_entry_bytes: int


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6]:port``); InvalidConfigurationError if it is not one."""
    host, sep, port_text = str(address).rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidConfigurationError(
            f"bookie address {address!r} is not host:port: pass address='host:port' when the bookie id "
            "is not an address (see its registration info)")
    return host, int(port_text)


class BookieClient:
    """One channel to one bookie; thread-safe; ``close()`` ends streams and the channel."""

    def __init__(self, bookie_id_or_address: str, *, address: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.bookie_id = str(bookie_id_or_address)
        target = address if address is not None else self.bookie_id
        host, port = parse_address(target)
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.timeout = timeout
        self._channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self._stub = pb_grpc.BookieStub(self._channel)
        self._streams: set[AddStream] = set()
        self._lock = threading.Lock()
        self._closed = False

    # --- adds ----------------------------------------------------------------------
    def add_stream(self, *, max_inflight: int = DEFAULT_MAX_INFLIGHT,
                   max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> AddStream:
        """Open an add stream; ``add()`` on it returns a Future per entry."""
        with self._lock:
            if self._closed:
                raise InvalidConfigurationError(f"client of bookie {self.bookie_id} is closed")
            stream = AddStream(self._stub, self.bookie_id, max_batch_bytes=max_batch_bytes,
                               max_inflight=max_inflight)
            self._streams = {open_stream for open_stream in self._streams if not open_stream.closed}
            self._streams.add(stream)
            return stream

    # --- reads ---------------------------------------------------------------------
    def read(self, ledger_id: int, first_entry_id: int, last_entry_id: int | None = None, *,
             fence: bool = False, master_key: bytes = b"", recovery: bool = False, max_bytes: int = 0,
             timeout: float | None = None) -> ReadResult:
        """Read one entry or the range first..last (stops early at a missing entry or max_bytes)."""
        last = first_entry_id if last_entry_id is None else last_entry_id
        request = _message(pb.ReadRequest, ledger_id=ledger_id, first_entry_id=first_entry_id,
                           last_entry_id=last, fence=fence, recovery=recovery, master_key=master_key,
                           max_bytes=max_bytes)
        what = f"read of ledger {ledger_id} entries {first_entry_id}..{last}" + (" with fence" if fence else "")
        response = self._unary(self._stub.Read, request, timeout, what)
        return ReadResult(as_status(response.status), response.message,
                          tuple((entry.entry_id, entry.body) for entry in response.entries),
                          response.last_add_confirmed, response.last_entry_id, response.fenced)

    def read_lac(self, ledger_id: int, previous: int | None = None, timeout: float = 10.0) -> LacResult:
        """The bookie's LAC for the ledger; with ``previous``, wait up to ``timeout`` s for a higher one."""
        if previous is None:
            request = _message(pb.ReadLacRequest, ledger_id=ledger_id)
            deadline = None
        else:
            request = _message(pb.ReadLacRequest, ledger_id=ledger_id, has_previous=True, previous_lac=previous,
                               timeout_ms=max(0, int(timeout * 1000)))
            deadline = timeout + self.timeout
        response = self._unary(self._stub.ReadLac, request, deadline, f"read_lac of ledger {ledger_id}")
        return LacResult(as_status(response.status), response.message, response.last_add_confirmed,
                         response.last_entry_id, response.fenced)

    def info(self, timeout: float | None = None) -> BookieInfo:
        response = self._unary(self._stub.Info, pb.BookieInfoRequest(), timeout, "info")
        return BookieInfo(as_status(response.status), response.bookie_id, response.free_bytes,
                          response.total_bytes, response.read_only, response.version, response.max_entry_bytes)

    def _unary(self, method, request, timeout: float | None, what: str):
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as exc:
            raise translate_rpc_error(exc, self.bookie_id, what) from exc

    # --- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        """Close every add stream (joining its threads) and the channel; idempotent."""
        with self._lock:
            self._closed = True
            streams, self._streams = list(self._streams), set()
        for stream in streams:
            stream.close()
        self._channel.close()

    def __enter__(self) -> "BookieClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _message(cls, **fields):
    """Build a request, turning protobuf's range/type errors into InvalidConfigurationError."""
    try:
        return cls(**fields)
    except (ValueError, TypeError) as exc:
        raise InvalidConfigurationError(f"invalid {cls.__name__} field: {exc}") from exc
