"""The seam between the replication client and its bookies, and its gRPC implementation.

``BookieTransport`` is everything the writer, reader and recovery use:
``send_adds`` (adds already encoded by ``add_wire.encode_add``, answered per
received batch to an ``AddListener``), ``add`` (one add, a Future), fencing /
range reads, LAC reads and explicit LAC writes (Futures; every one carries the
ledger's master key, which bookies require), plus the list of
registered bookies. Answers are the real result types of ``bookie_rpc`` /
``add_wire`` (and the wire's ``AddResult`` messages for ``send_adds``); a
transport failure completes the future with a BookieError (an unknown
outcome), or reaches the listener's ``on_add_failure``.

Contract: a read, LAC-read or LAC-write future completes within its timeout
(+ a small margin); an add is answered when the bookie answers or the stream
breaks (the writer's add timeout covers a bookie that stays silent).
``send_adds`` may raise BookieError, having sent nothing, when the bookie
cannot be reached at all, or report that later to the listener's
``on_add_failure``; ``send_adds_to`` sends the same adds to several bookies
(a writer's write set) and returns the bookies that refused them at once,
with their errors, instead of raising. Listeners and future callbacks run on transport threads
and must not block.

``GrpcTransport`` runs the one shared AddStream per bookie of its
``BookiePool`` on the pool's IoLoop thread, its ``io_loop``, which also owns
every writer's state (``add_bookkeeping.WriterOwner``): adds sent on that
thread go straight into the stream's queue; adds sent from other threads
are queued in an ``AddOutbox`` that hands them, batched, to the streams on
that thread. Unary calls go through gRPC futures: no thread waits for an
answer. ``pyspark_ledger.testing.
fake_bookies`` implements the same interface in memory.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Protocol, Sequence

from pyspark_ledger.client.add_outbox import AddOutbox
from pyspark_ledger.client.add_listeners import AddListener
from pyspark_ledger.client.add_wire import AddResult
from pyspark_ledger.client.batch_window import DEFAULT_BATCHES_IN_FLIGHT
from pyspark_ledger.client.bookie_pool import BookiePool
from pyspark_ledger.client.bookie_answers import LacResult, ReadResult, WriteLacResult
from pyspark_ledger.errors import BookieError, BookieUnavailableError, LedgerError
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.status import BookieStatus

#: the transport conditions that count a bookie as unreachable (a cancelled or closed call does not)
_UNREACHABLE = (BookieStatus.UNAVAILABLE, BookieStatus.TIMEOUT)

class BookieTransport(Protocol):
    def send_adds(self, bookie_id: str, ledger_id: int, adds: Sequence[tuple[int, bytes]],
                  listener: AddListener) -> None: ...

    def send_adds_to(self, bookie_ids: Sequence[str], ledger_id: int, adds: Sequence[tuple[int, bytes]],
                     listener: AddListener) -> list[tuple[str, BookieError]]: ...

    def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
            recovery: bool = False) -> "Future[AddResult]": ...

    def read(self, bookie_id: str, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
             master_key: bytes, fence: bool = False, max_bytes: int = 0,
             timeout: float = 10.0, entry_step: int = 1) -> "Future[ReadResult]": ...

    def read_lac(self, bookie_id: str, ledger_id: int, previous: int | None = None,
                 timeout: float = 10.0, *, master_key: bytes) -> "Future[LacResult]": ...

    def write_lac(self, bookie_id: str, ledger_id: int, master_key: bytes, last_add_confirmed: int,
                  timeout: float = 10.0) -> "Future[WriteLacResult]": ...

    def bookies(self, include_read_only: bool = True) -> list[str]: ...

    def unreachable(self) -> dict[str, str]: ...

    def close(self) -> None: ...


def failed_future(error: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(error)
    return future


class GrpcTransport:
    """BookieTransport over real bookies reached through gRPC (see the module docstring).

    ``io_threads`` is accepted for compatibility and unused: no thread waits for a read any more.
    """

    def __init__(self, store: MetadataStore, *, io_threads: int = 16, timeout: float = 10.0,
                 max_batch_bytes: int = 4 * 1024 * 1024, max_inflight: int = 10_000,
                 max_batches_in_flight: int | None = DEFAULT_BATCHES_IN_FLIGHT, tls=None, answer_runs: bool = True,
                 framed_adds: bool = False, framed_reads: bool = False) -> None:
        self._pool = BookiePool(store, timeout=timeout, max_batch_bytes=max_batch_bytes, max_inflight=max_inflight,
                                max_batches_in_flight=max_batches_in_flight, tls=tls, answer_runs=answer_runs,
                                framed_adds=framed_adds, framed_reads=framed_reads)
        self._io = self._pool.io_loop  # kept after close: the writers' owner (then closed: events run inline)
        self._outbox = AddOutbox(self._io, self._send_now)
        self._health = Reachability()

    @property
    def io_loop(self):
        """The network thread: writers run their state on it (``add_bookkeeping.WriterOwner``)."""
        return self._io

    def send_adds(self, bookie_id: str, ledger_id: int, adds: Sequence[tuple[int, bytes]],
                  listener: AddListener) -> None:
        if self._io.in_loop_thread():  # a writer's owner: straight into the stream's queue
            self._send_now(bookie_id, ledger_id, adds, listener)
        else:
            self._outbox.put(bookie_id, ledger_id, adds, listener)

    def send_adds_to(self, bookie_ids: Sequence[str], ledger_id: int, adds: Sequence[tuple[int, bytes]],
                     listener: AddListener) -> list[tuple[str, BookieError]]:
        return self._outbox.put_all(bookie_ids, ledger_id, adds, listener)

    def _send_now(self, bookie_id: str, ledger_id: int, adds: Sequence[tuple[int, bytes]],
                  listener: AddListener) -> None:
        """Hand adds to the bookie's stream (on the network loop, from the outbox)."""
        for attempt in (0, 1):
            try:
                stream = self._pool.stream(bookie_id)
            except LedgerError as exc:
                raise _as_bookie_error(exc, bookie_id) from exc
            try:
                stream.send(ledger_id, adds, listener)
                return
            except BookieUnavailableError:
                if attempt:
                    raise
                self._pool.forget_stream(bookie_id, stream)  # it had ended: open a new one once

    def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
            recovery: bool = False) -> "Future[AddResult]":
        for attempt in (0, 1):
            try:
                stream = self._pool.stream(bookie_id)
            except LedgerError as exc:
                return failed_future(_as_bookie_error(exc, bookie_id))
            future = stream.add(ledger_id, entry_id, master_key, body, recovery)
            if attempt or not future.done() or future.exception() is None:
                return self._health.watch(bookie_id, future)
            self._pool.forget_stream(bookie_id, stream)  # it had ended: open a new one once
        return future

    def read(self, bookie_id: str, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
             master_key: bytes, fence: bool = False, max_bytes: int = 0,
             timeout: float = 10.0, entry_step: int = 1) -> "Future[ReadResult]":
        return self._call(bookie_id, lambda client: client.read_async(
            ledger_id, first_entry_id, last_entry_id, fence=fence, master_key=master_key,
            recovery=fence, max_bytes=max_bytes, timeout=timeout, entry_step=entry_step))

    def read_lac(self, bookie_id: str, ledger_id: int, previous: int | None = None,
                 timeout: float = 10.0, *, master_key: bytes) -> "Future[LacResult]":
        return self._call(bookie_id, lambda client: client.read_lac_async(ledger_id, previous, timeout,
                                                                          master_key=master_key))

    def write_lac(self, bookie_id: str, ledger_id: int, master_key: bytes, last_add_confirmed: int,
                  timeout: float = 10.0) -> "Future[WriteLacResult]":
        return self._call(bookie_id, lambda client: client.write_lac_async(ledger_id, master_key,
                                                                           last_add_confirmed, timeout))

    def bookies(self, include_read_only: bool = True) -> list[str]:
        return self._pool.bookies(include_read_only)

    def refused(self) -> dict[str, str]:
        """Registered bookies this client's TLS settings cannot talk to: id -> which setting to change."""
        return self._pool.refused()

    def locations(self) -> dict:
        """Zone and rack (``metadata.bookie_location.Location``) of each bookie, from the registrations the
        last ``bookies()`` read."""
        return self._pool.locations()

    def unreachable(self) -> dict[str, str]:
        """Bookies whose last read, LAC call or single add failed as unreachable: id -> why, and how long ago;
        and the registered bookies this client's TLS settings cannot talk to: id -> which setting to change."""
        return {**self._health.unreachable(), **self._pool.refused()}

    def close(self) -> None:
        """Close every add stream and channel (calls in flight fail as cancelled) and join the loop thread."""
        self._outbox.close()
        self._pool.close()

    def _call(self, bookie_id: str, call) -> Future:
        try:
            return self._health.watch(bookie_id, call(self._pool.client(bookie_id)))
        except LedgerError as exc:  # the bookie cannot be located, or a malformed request
            return failed_future(exc)


class Reachability:
    """The last transport outcome per bookie of the calls it watches: why a bookie is unreachable now.

    Not on the writer's add path (its adds go through ``send_adds``); errors that name bookies use it."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[float, str]] = {}

    def watch(self, bookie_id: str, future: Future) -> Future:
        future.add_done_callback(lambda done: self._outcome(bookie_id, done))
        return future

    def _outcome(self, bookie_id: str, done: Future) -> None:
        error = None if done.cancelled() else done.exception()
        with self._lock:
            if isinstance(error, BookieUnavailableError) and error.status in _UNREACHABLE:
                self._failures[bookie_id] = (self._clock(), str(error))
            elif error is None:
                self._failures.pop(bookie_id, None)

    def unreachable(self) -> dict[str, str]:
        now = self._clock()
        with self._lock:
            failures = dict(self._failures)
        return {bookie: f"{why} ({now - when:.1f} s ago)" for bookie, (when, why) in sorted(failures.items())}


def _as_bookie_error(exc: LedgerError, bookie_id: str) -> BookieError:
    if isinstance(exc, BookieError):
        return exc
    return BookieUnavailableError(f"bookie {bookie_id} cannot be reached: {exc}", bookie_id=bookie_id,
                                  status=BookieStatus.UNAVAILABLE)
