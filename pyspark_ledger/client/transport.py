"""The seam between the replication client and its bookies, and its gRPC implementation.

``BookieTransport`` is everything the writer, reader and recovery use: adds,
(fencing / range) reads and LAC reads, each returning a
``concurrent.futures.Future``, plus the list of registered bookies. Answers
are the real result types of ``bookie_rpc`` / ``add_stream``; a transport
failure completes the future with a BookieError (an unknown outcome).

Contract: a read or LAC-read future completes within its timeout (+ a small
margin); an add future completes when the bookie answers or the stream
breaks (the writer's add timeout covers a bookie that stays silent).

``GrpcTransport`` runs adds over the one shared AddStream per bookie of its
``BookiePool`` and the blocking unary calls of ``BookieClient`` on a bounded
thread pool it owns. ``pyspark_ledger.testing.fake_bookies`` implements the
same interface in memory.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from pyspark_ledger.client.add_stream import AddResult
from pyspark_ledger.client.bookie_pool import BookiePool
from pyspark_ledger.client.bookie_rpc import LacResult, ReadResult
from pyspark_ledger.errors import BookieError, BookieUnavailableError, LedgerError
from pyspark_ledger.metadata.store import MetadataStore


class BookieTransport(Protocol):
    def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
            recovery: bool = False) -> "Future[AddResult]": ...

    def read(self, bookie_id: str, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
             fence: bool = False, master_key: bytes = b"", max_bytes: int = 0,
             timeout: float = 10.0) -> "Future[ReadResult]": ...

    def read_lac(self, bookie_id: str, ledger_id: int, previous: int | None = None,
                 timeout: float = 10.0) -> "Future[LacResult]": ...

    def bookies(self, include_read_only: bool = True) -> list[str]: ...

    def close(self) -> None: ...


def failed_future(error: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(error)
    return future


class GrpcTransport:
    """BookieTransport over real bookies reached through gRPC (see the module docstring)."""

    def __init__(self, store: MetadataStore, *, io_threads: int = 16, timeout: float = 10.0,
                 max_batch_bytes: int = 4 * 1024 * 1024, max_inflight: int = 10_000) -> None:
        self._pool = BookiePool(store, timeout=timeout, max_batch_bytes=max_batch_bytes, max_inflight=max_inflight)
        self._executor = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="ledger-io")

    def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
            recovery: bool = False) -> "Future[AddResult]":
        for attempt in (0, 1):
            try:
                stream = self._pool.stream(bookie_id)
            except LedgerError as exc:
                return failed_future(_as_bookie_error(exc, bookie_id))
            future = stream.add(ledger_id, entry_id, master_key, body, recovery)
            if attempt or not future.done() or future.exception() is None:
                return future
            self._pool.forget_stream(bookie_id, stream)  # it had ended: open a new one once
        return future

    def read(self, bookie_id: str, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
             fence: bool = False, master_key: bytes = b"", max_bytes: int = 0,
             timeout: float = 10.0) -> "Future[ReadResult]":
        return self._submit(bookie_id, lambda client: client.read(
            ledger_id, first_entry_id, last_entry_id, fence=fence, master_key=master_key,
            recovery=fence, max_bytes=max_bytes, timeout=timeout))

    def read_lac(self, bookie_id: str, ledger_id: int, previous: int | None = None,
                 timeout: float = 10.0) -> "Future[LacResult]":
        return self._submit(bookie_id, lambda client: client.read_lac(ledger_id, previous, timeout))

    def bookies(self, include_read_only: bool = True) -> list[str]:
        return self._pool.bookies(include_read_only)

    def close(self) -> None:
        """Stop the read threads (waiting for calls in flight) and close every channel."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._pool.close()

    def _submit(self, bookie_id: str, call) -> Future:
        def run():
            return call(self._pool.client(bookie_id))
        try:
            return self._executor.submit(run)
        except RuntimeError as exc:  # shut down
            return failed_future(BookieUnavailableError(f"the client is closed: {exc}", bookie_id=bookie_id,
                                                        status="CLOSED"))


def _as_bookie_error(exc: LedgerError, bookie_id: str) -> BookieError:
    if isinstance(exc, BookieError):
        return exc
    return BookieUnavailableError(f"bookie {bookie_id} cannot be reached: {exc}", bookie_id=bookie_id,
                                  status="UNAVAILABLE")
