"""The client side of the bookie wire protocol: the gRPC channels to one bookie.

``BookieClient`` offers add streams (``add_stream()``), range/fence reads (range reads on the bookie's framed port
when it is given one, docs/protocol.md W12: ``read_port``),
LAC reads and long polls, explicit LAC writes, and bookie info. Statuses the
bookie decided are returned as values (``ReadResult.status`` ...): the
replication client decides on them. Transport failures raise BookieError;
BookieUnavailableError for an unreachable bookie or a deadline (an unknown
outcome). The ``*_async`` forms return a ``concurrent.futures.Future`` that
fails with those errors instead; they hold no thread while waiting and their
callbacks run on the loop thread (keep them short).

With ``tls`` (a ``security.tls.ClientTls`` that is enabled) the channel is a TLS one (its credentials
are read from the files once, when the client is made; a bad file raises InvalidConfigurationError naming
the setting), and a failed handshake is reported as such, naming the settings to check.

Every call runs on one grpc.aio channel driven by an ``IoLoop``: the one
passed in, or the process's shared one, acquired at the first call and
released in ``close()``. The blocking forms wait for the
loop, so never call them from the loop's own thread (a listener or a future
callback).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future
from typing import Callable

import grpc
import grpc.aio

from pyspark_ledger.client.add_stream import DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_INFLIGHT, AddStream
from pyspark_ledger.client.batch_window import DEFAULT_BATCHES_IN_FLIGHT
from pyspark_ledger.client.bookie_answers import (BookieInfo, LacResult, ReadResult, WriteLacResult, bookie_info,
                                                  lac_result, read_result, write_lac_result)
from pyspark_ledger.client.framed_call import FramedCall
from pyspark_ledger.client.framed_reads import FramedReadRoute, FramedReadsUnusable
from pyspark_ledger.client.io_loop import IoLoop, acquire_io_loop, release_io_loop
from pyspark_ledger.client.read_wire import decode_read_response
from pyspark_ledger.client.rpc_errors import BookieStatus, translate_rpc_error
from pyspark_ledger.errors import BookieUnavailableError, InvalidArgumentError, InvalidStateError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc
from pyspark_ledger.wire.ack_runs import ASK_FOR_RUNS

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S = 30.0
FRAMED_RETRY_S = 30.0  # after a framed add port could not be reached, new streams take gRPC this long
#: The least time a connection attempt to a bookie is given (see CHANNEL_OPTIONS).
CONNECT_TIMEOUT_MS = 5_000
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    # gRPC takes this option as the *connect timeout* (the least time a connection attempt, TCP and the
    # HTTP/2 handshake, is given), not as a back-off. At 100 ms a bookie that answers slowly because its
    # host is busy (a Spark job beside it, load 20 on 2 cores) failed as "connection attempt timed out
    # before receiving SETTINGS frame", and a fresh client then treated all three bookies as failed.
    # A refused connection still fails at once; only a silent peer waits this long.
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    ("grpc.enable_retries", 0),
    # Each channel owns its connections: a new client never inherits the reconnect back-off another
    # client of this process is serving for the same address (issue 12, part 8).
    ("grpc.use_local_subchannel_pool", 1),
)
_IN_BACKOFF = grpc.ChannelConnectivity.TRANSIENT_FAILURE
READ_METHOD = "/pyspark_ledger.wire.v1.Bookie/Read"


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6]:port``); InvalidArgumentError if it is not one."""
    host, sep, port_text = str(address).rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidArgumentError(
            f"bookie address {address!r} is not host:port: pass address='host:port' when the bookie id "
            "is not an address (see its registration info)")
    return host, int(port_text)


class BookieClient:
    """One channel to one bookie; thread-safe; ``close()`` ends streams and the channel."""

    def __init__(self, bookie_id_or_address: str, *, address: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, io_loop: IoLoop | None = None, tls=None,
                 credentials: grpc.ChannelCredentials | None = None, answer_runs: bool = True,
                 read_port: Callable[[], int] | None = None) -> None:
        """``read_port``: the bookie's framed port for range reads (docs/protocol.md W12), asked when read
        connections are first needed and again after they could not be used; 0 or None: reads take gRPC."""
        self.bookie_id = str(bookie_id_or_address)
        self._answer_runs = answer_runs
        self._add_metadata = ASK_FOR_RUNS if answer_runs else None  # docs/protocol.md W9
        target = address if address is not None else self.bookie_id
        host, port = parse_address(target)
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._host = host
        self.timeout = timeout
        self.tls = tls if tls is not None and tls.enabled else None
        if self.tls is not None and credentials is None:
            credentials = self.tls.channel_credentials()
        self._credentials = credentials if self.tls is not None else None
        self._framed_ssl = None  # the ssl context of framed add streams over TLS, made at the first such stream
        self._framed_unreachable: dict[int, float] = {}  # add port -> when it could not be reached (monotonic)
        self._read_route = None if read_port is None else FramedReadRoute(  # used on the loop thread only
            self._host, self.bookie_id, read_port, self._framed_tls, FRAMED_RETRY_S)
        self._io = io_loop
        self._owns_io = io_loop is None
        self._channel: grpc.aio.Channel | None = None  # made on the loop thread at the first call
        self._stub: pb_grpc.BookieStub | None = None
        self._closing: set[asyncio.Future] = set()  # channels replaced by ``_reconnected``, closing
        self._streams: set[AddStream] = set()
        self._lock = threading.Lock()
        self._closed = False

    # --- adds ----------------------------------------------------------------------
    def add_stream(self, *, max_inflight: int = DEFAULT_MAX_INFLIGHT, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                   max_batches_in_flight: int | None = DEFAULT_BATCHES_IN_FLIGHT, add_port: int = 0) -> AddStream:
        """Open an add stream (``send`` answers per batch; ``add`` returns a Future per entry): on the bookie's
        framed add port ``add_port`` when it is given (docs/protocol.md W11; over TLS with TLS settings), else
        gRPC. A framed port that cannot be reached at all (``FramedCall.fallback_ok``) gives way to gRPC, logged
        (at INFO: a bookie that is down refuses both ports, and says so through the gRPC stream's failure), and
        for ``FRAMED_RETRY_S`` later streams take gRPC at once."""
        with self._lock:
            io_loop = self._loop_locked()
            failed_at = self._framed_unreachable.get(add_port)
            if failed_at is not None and time.monotonic() - failed_at >= FRAMED_RETRY_S:
                del self._framed_unreachable[add_port]
                failed_at = None
            fallback = on_fallback = None
            if add_port and failed_at is None:
                tls = self._framed_tls_locked()

                def open_call() -> FramedCall:
                    return FramedCall(self._host, add_port, self.bookie_id, answer_runs=self._answer_runs,
                                      ssl_context=tls)
                fallback = self._open_add_call

                def fell_back(error: Exception) -> None:
                    with self._lock:
                        self._framed_unreachable[add_port] = time.monotonic()
                    log.info("%s; adds to bookie %s take its gRPC port instead, and its framed port is tried "
                                "again in %.0f s", error, self.bookie_id, FRAMED_RETRY_S)
                on_fallback = fell_back
            else:
                open_call = self._open_add_call
            stream = AddStream(open_call, self.bookie_id, io_loop, max_batch_bytes=max_batch_bytes,
                               max_inflight=max_inflight, max_batches_in_flight=max_batches_in_flight, tls=self.tls,
                               fallback=fallback, on_fallback=on_fallback)
            self._streams = {open_stream for open_stream in self._streams if not open_stream.closed}
            self._streams.add(stream)
            return stream

    def _framed_tls_locked(self):
        """The ssl context of this client's TLS settings for framed add streams (made once), None without TLS."""
        if self.tls is not None and self._framed_ssl is None:
            self._framed_ssl = self.tls.ssl_context()
        return self._framed_ssl

    def _open_add_call(self) -> grpc.aio.StreamStreamCall:
        """A new AddStream call (runs on the loop thread); adds travel pre-encoded (``add_wire``)."""
        method = self._reconnected().stream_stream("/pyspark_ledger.wire.v1.Bookie/AddStream",
                                                      request_serializer=bytes,  # (a LargeAdd joined)
                                                      response_deserializer=pb.AddResultBatch.FromString)
        return method(metadata=self._add_metadata)

    def _ensure_channel(self) -> grpc.aio.Channel:
        """The aio channel, made at first use (only ever called on the loop thread)."""
        if self._closed:
            raise BookieUnavailableError(f"client of bookie {self.bookie_id} is closed", bookie_id=self.bookie_id,
                                         status=BookieStatus.CLOSED)
        if self._channel is None:
            if self._credentials is not None:
                self._channel = grpc.aio.secure_channel(self.address, self._credentials, options=CHANNEL_OPTIONS)
            else:
                self._channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
            self._stub = pb_grpc.BookieStub(self._channel)
            self._stub.Read = self._channel.unary_unary(  # large entries decoded where they arrived (read_wire)
                READ_METHOD, request_serializer=pb.ReadRequest.SerializeToString,
                response_deserializer=decode_read_response, _registered_method=True)
        return self._channel

    def _reconnected(self) -> grpc.aio.Channel:
        """The channel, replaced by a new one if the old one is waiting out a reconnect back-off.

        gRPC fails a call at once, with the error of the last connection attempt, while the channel
        waits out its back-off after a refused connection (up to 1 s): right after a bookie restarted, a
        call would be told "connection refused" although the bookie is up. A new channel tries at once,
        so the answer is always about the bookie as it is now: connected if it is back, refused (within
        a millisecond on a local network) if it is still down. Costs one state query when the channel is
        healthy; runs on the loop thread. The old channel has nothing in flight (it has no connection)."""
        channel = self._ensure_channel()
        if channel.get_state(try_to_connect=False) is not _IN_BACKOFF:
            return channel
        self._channel = self._stub = None
        closing = asyncio.ensure_future(channel.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        return self._ensure_channel()

    def _loop_locked(self) -> IoLoop:
        if self._closed:
            raise InvalidStateError(f"client of bookie {self.bookie_id} is closed")
        if self._io is None:
            self._io = acquire_io_loop()
        return self._io

    # --- reads ---------------------------------------------------------------------
    def read(self, ledger_id: int, first_entry_id: int, last_entry_id: int | None = None, *,
             fence: bool = False, master_key: bytes = b"", recovery: bool = False, max_bytes: int = 0,
             timeout: float | None = None, entry_step: int = 1) -> ReadResult:
        """Read one entry or the range first..last (only first, first + entry_step, ... with entry_step > 1);
        stops early at a missing entry or max_bytes."""
        request, what = self._read_request(ledger_id, first_entry_id, last_entry_id, fence, master_key, recovery,
                                           max_bytes, entry_step)
        if self._read_route is not None and not fence:
            with self._lock:
                io_loop = self._loop_locked()
            return io_loop.run(self._read_framed(request, timeout, what))
        return self._unary("Read", request, timeout, what, read_result)

    def read_async(self, ledger_id: int, first_entry_id: int, last_entry_id: int | None = None, *,
                   fence: bool = False, master_key: bytes = b"", recovery: bool = False, max_bytes: int = 0,
                   timeout: float | None = None, entry_step: int = 1) -> "Future[ReadResult]":
        """``read`` without blocking a thread."""
        request, what = self._read_request(ledger_id, first_entry_id, last_entry_id, fence, master_key, recovery,
                                           max_bytes, entry_step)
        if self._read_route is not None and not fence:
            with self._lock:
                if self._closed:
                    return _failed(BookieUnavailableError(f"{what} on bookie {self.bookie_id}: the client is closed",
                                                          bookie_id=self.bookie_id, status=BookieStatus.CLOSED))
                io_loop = self._loop_locked()
            return io_loop.submit(self._read_framed(request, timeout, what))
        return self._unary_async("Read", request, timeout, what, read_result)

    async def _read_framed(self, request: pb.ReadRequest, timeout: float | None, what: str) -> ReadResult:
        """A range read on the framed port (docs/protocol.md W12; fencing reads stay on gRPC), or on gRPC while
        that port is unusable: none registered, or it could not be used (then for ``FRAMED_RETRY_S``)."""
        if self._closed:
            raise BookieUnavailableError(f"client of bookie {self.bookie_id} is closed", bookie_id=self.bookie_id,
                                         status=BookieStatus.CLOSED)
        reads = self._read_route.current()
        if reads is not None:
            try:
                return read_result(await reads.read(request, self.timeout if timeout is None else timeout))
            except FramedReadsUnusable as exc:  # this read takes gRPC; the port too, if none of its connections works
                self._read_route.unusable(reads, exc)
            except asyncio.CancelledError:
                raise BookieUnavailableError(f"{what} on bookie {self.bookie_id} was cancelled (the client closed)",
                                             bookie_id=self.bookie_id, status=BookieStatus.CANCELLED) from None
        return await self._invoke("Read", request, timeout, what, read_result)

    def _framed_tls(self):
        with self._lock:
            return self._framed_tls_locked()

    def _read_request(self, ledger_id, first_entry_id, last_entry_id, fence, master_key, recovery, max_bytes,
                      entry_step):
        last = first_entry_id if last_entry_id is None else last_entry_id
        request = _message(pb.ReadRequest, ledger_id=ledger_id, first_entry_id=first_entry_id,
                           last_entry_id=last, fence=fence, recovery=recovery, master_key=master_key,
                           max_bytes=max_bytes, entry_step=entry_step)
        steps = f" in steps of {entry_step}" if entry_step > 1 else ""
        what = (f"read of ledger {ledger_id} entries {first_entry_id}..{last}{steps}"
                + (" with fence" if fence else ""))
        return request, what

    def read_lac(self, ledger_id: int, previous: int | None = None, timeout: float = 10.0, *,
                 master_key: bytes = b"") -> LacResult:
        """The bookie's LAC for the ledger; with ``previous``, wait up to ``timeout`` s for a higher one.
        Bookies need the ledger's ``master_key`` (an ``--admin-identity`` caller may leave it out)."""
        request, deadline = self._lac_request(ledger_id, previous, timeout, master_key)
        return self._unary("ReadLac", request, deadline, f"read_lac of ledger {ledger_id}", lac_result)

    def read_lac_async(self, ledger_id: int, previous: int | None = None,
                       timeout: float = 10.0, *, master_key: bytes = b"") -> "Future[LacResult]":
        """``read_lac`` (or its long poll) without blocking a thread."""
        request, deadline = self._lac_request(ledger_id, previous, timeout, master_key)
        return self._unary_async("ReadLac", request, deadline, f"read_lac of ledger {ledger_id}", lac_result)

    def _lac_request(self, ledger_id: int, previous: int | None, timeout: float, master_key: bytes):
        if previous is None:
            return _message(pb.ReadLacRequest, ledger_id=ledger_id, master_key=master_key), None
        request = _message(pb.ReadLacRequest, ledger_id=ledger_id, has_previous=True, previous_lac=previous,
                           timeout_ms=max(0, int(timeout * 1000)), master_key=master_key)
        return request, timeout + self.timeout

    def write_lac(self, ledger_id: int, master_key: bytes, last_add_confirmed: int,
                  timeout: float | None = None) -> WriteLacResult:
        """Explicit LAC: the bookie keeps max(its LAC, ``last_add_confirmed``) for readers."""
        request = self._write_lac_request(ledger_id, master_key, last_add_confirmed)
        return self._unary("WriteLac", request, timeout, f"write_lac of ledger {ledger_id}", write_lac_result)

    def write_lac_async(self, ledger_id: int, master_key: bytes, last_add_confirmed: int,
                        timeout: float | None = None) -> "Future[WriteLacResult]":
        request = self._write_lac_request(ledger_id, master_key, last_add_confirmed)
        return self._unary_async("WriteLac", request, timeout, f"write_lac of ledger {ledger_id}",
                                 write_lac_result)

    @staticmethod
    def _write_lac_request(ledger_id: int, master_key: bytes, last_add_confirmed: int) -> pb.WriteLacRequest:
        return _message(pb.WriteLacRequest, ledger_id=ledger_id, master_key=master_key,
                        last_add_confirmed=last_add_confirmed)

    def info(self, timeout: float | None = None) -> BookieInfo:
        return self._unary("Info", pb.BookieInfoRequest(), timeout, "info", bookie_info)

    # --- calls ----------------------------------------------------------------------
    def _unary(self, method: str, request, timeout: float | None, what: str, convert: Callable):
        """Run one call and wait for its converted answer; BookieError on a transport failure."""
        with self._lock:
            io_loop = self._loop_locked()
        return io_loop.run(self._invoke(method, request, timeout, what, convert))

    def _unary_async(self, method: str, request, timeout: float | None, what: str, convert: Callable) -> Future:
        with self._lock:
            if self._closed:
                return _failed(BookieUnavailableError(f"{what} on bookie {self.bookie_id}: the client is closed",
                                                      bookie_id=self.bookie_id, status=BookieStatus.CLOSED))
            io_loop = self._loop_locked()
        return io_loop.submit(self._invoke(method, request, timeout, what, convert))

    async def _invoke(self, method: str, request, timeout: float | None, what: str, convert: Callable):
        try:
            self._reconnected()
            response = await getattr(self._stub, method)(request, timeout=self.timeout if timeout is None
                                                         else timeout)
        except grpc.RpcError as exc:
            raise translate_rpc_error(exc, self.bookie_id, what, self.tls) from exc
        except asyncio.CancelledError:
            raise BookieUnavailableError(f"{what} on bookie {self.bookie_id} was cancelled (the client closed)",
                                         bookie_id=self.bookie_id, status=BookieStatus.CANCELLED) from None
        except Exception as exc:  # noqa: BLE001 - e.g. the channel was closed under the call
            raise BookieUnavailableError(f"{what} on bookie {self.bookie_id} failed: {exc!r}",
                                         bookie_id=self.bookie_id, status=BookieStatus.CLOSED) from exc
        return convert(response)

    # --- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        """Close every add stream and the channel (and the loop this client started); idempotent."""
        with self._lock:
            self._closed = True
            streams, self._streams = list(self._streams), set()
            io_loop = self._io
        for stream in streams:
            stream.close()
        if io_loop is None:
            return
        if not io_loop.closed:
            try:
                io_loop.run(self._close_channel(), timeout=10.0)
            except Exception:  # noqa: BLE001 - closing anyway; the loop's shutdown cancels what is left
                log.warning("closing the channel to bookie %s failed", self.bookie_id, exc_info=True)
        if self._owns_io:
            release_io_loop(io_loop)

    async def _close_channel(self) -> None:
        if self._read_route is not None:
            self._read_route.close()
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    def __enter__(self) -> "BookieClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _message(cls, **fields):
    """Build a request, turning protobuf's range/type errors into InvalidArgumentError."""
    try:
        return cls(**fields)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"invalid {cls.__name__} field: {exc}") from exc


def _failed(error: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(error)
    return future
