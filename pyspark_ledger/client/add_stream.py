"""A client-side add stream to one bookie: coalesced sends, one future per entry.

``AddStream.add(...)`` queues an add and returns a ``concurrent.futures.Future``
resolving to an ``AddResult`` (the bookie's status for that entry). The
sender — a generator consumed by gRPC's request thread — coalesces whatever is
queued into one AddBatch (up to ``max_batch_bytes``); a receiver thread
resolves futures by (ledger_id, entry_id) as AddResultBatch messages arrive,
in the bookie's durability order.

When the stream breaks (bookie gone, cancelled, ended by a draining bookie)
every unanswered future fails with BookieUnavailableError: the add may or
may not be stored. ``close()`` half-closes, waits (bounded) for the answers
in flight and joins the receiver thread.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Iterator

import grpc

from pyspark_ledger.client.rpc_errors import BookieStatus, as_status, translate_rpc_error
from pyspark_ledger.errors import BookieError, BookieUnavailableError, InvalidConfigurationError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_INFLIGHT = 10_000


@dataclass(frozen=True, slots=True)
class AddResult:
    """The bookie's answer to one add."""

    status: BookieStatus
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == BookieStatus.OK


ADD_OK = AddResult(BookieStatus.OK)


class AddStream:
    """One AddStream RPC; thread-safe ``add()``; see the module docstring."""

    def __init__(self, stub, bookie_id: str, *, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_inflight: int = DEFAULT_MAX_INFLIGHT) -> None:
        if max_batch_bytes < 1 or max_inflight < 1:
            raise InvalidConfigurationError("max_batch_bytes and max_inflight must be positive")
        self.bookie_id = bookie_id
        self._max_batch_bytes = max_batch_bytes
        self._max_inflight = max_inflight
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._has_room = threading.Condition(self._lock)
        self._queue: list[tuple[int, int, bytes, bytes, bool]] = []
        self._queued_bytes = 0
        self._pending: dict[tuple[int, int], Future] = {}
        self._closing = False
        self._failure: BookieError | None = None
        self._call = stub.AddStream(self._batches())
        self._receiver = threading.Thread(target=self._receive, name=f"add-stream-receiver {bookie_id}",
                                          daemon=True)
        self._receiver.start()

    @property
    def pending(self) -> int:
        """Adds sent or queued and not yet answered."""
        return len(self._pending)

    @property
    def closed(self) -> bool:
        """True once the stream ended (closed, failed or ended by the bookie)."""
        return not self._receiver.is_alive()

    def add(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
            recovery: bool = False) -> "Future[AddResult]":
        """Queue one add; blocks while ``max_inflight`` adds are unanswered."""
        _check_add(ledger_id, entry_id, master_key, body)
        future: Future = Future()
        key = (ledger_id, entry_id)
        with self._lock:
            while len(self._pending) >= self._max_inflight and self._failure is None and not self._closing:
                self._has_room.wait()
            if self._failure is not None or self._closing:
                future.set_exception(self._failure or BookieUnavailableError(
                    f"add stream to bookie {self.bookie_id} is closed", bookie_id=self.bookie_id, status="CLOSED"))
                return future
            if key in self._pending:
                raise InvalidConfigurationError(
                    f"ledger {ledger_id} entry {entry_id} is already in flight on this stream to bookie "
                    f"{self.bookie_id}: wait for its answer before re-sending it")
            self._pending[key] = future
            self._queue.append((ledger_id, entry_id, master_key, body, recovery))
            self._queued_bytes += len(body)
            if len(self._queue) == 1:
                self._has_work.notify()
        return future

    def close(self, timeout: float = 10.0) -> None:
        """Half-close, wait up to ``timeout`` for answers in flight, then cancel; joins the receiver."""
        with self._lock:
            self._closing = True
            self._has_work.notify_all()
            self._has_room.notify_all()
        self._receiver.join(timeout)
        if self._receiver.is_alive():
            self._call.cancel()
            self._receiver.join()

    def __enter__(self) -> "AddStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- sending (runs on gRPC's request-consumer thread) ----------------------------
    def _batches(self) -> Iterator[pb.AddBatch]:
        while True:
            with self._lock:
                while not self._queue and not self._closing and self._failure is None:
                    self._has_work.wait()
                if self._failure is not None or not self._queue:
                    return
                taken = self._take_batch()
            batch = pb.AddBatch()
            add = batch.adds.add
            for ledger_id, entry_id, master_key, body, recovery in taken:
                add(ledger_id=ledger_id, entry_id=entry_id, master_key=master_key, body=body, recovery=recovery)
            yield batch

    def _take_batch(self) -> list[tuple[int, int, bytes, bytes, bool]]:
        """Pop queued adds up to max_batch_bytes (at least one); caller holds the lock."""
        if self._queued_bytes <= self._max_batch_bytes:
            taken, self._queue, self._queued_bytes = self._queue, [], 0
            return taken
        size = count = 0
        for item in self._queue:
            if count and size + len(item[3]) > self._max_batch_bytes:
                break
            size += len(item[3])
            count += 1
        taken, self._queue = self._queue[:count], self._queue[count:]
        self._queued_bytes -= size
        return taken

    # --- receiving ------------------------------------------------------------------
    def _receive(self) -> None:
        failure: BookieError | None = None
        try:
            for response in self._call:
                self._resolve(response.results)
        except grpc.RpcError as exc:
            failure = translate_rpc_error(exc, self.bookie_id, "add stream")
        except Exception as exc:  # noqa: BLE001 - every pending future must learn the stream is gone
            failure = BookieError(f"add stream to bookie {self.bookie_id} failed: {exc!r}",
                                  bookie_id=self.bookie_id, status="UNKNOWN")
        self._fail_pending(failure or BookieUnavailableError(
            f"bookie {self.bookie_id} ended the add stream before answering every add",
            bookie_id=self.bookie_id, status="UNAVAILABLE"))

    def _resolve(self, results) -> None:
        answered = []
        with self._lock:
            pop = self._pending.pop
            for result in results:
                future = pop((result.ledger_id, result.entry_id), None)
                if future is not None:
                    answered.append((future, result))
            if answered and len(self._pending) < self._max_inflight:
                self._has_room.notify_all()
        for future, result in answered:
            if result.status == pb.OK:
                future.set_result(ADD_OK)
            else:
                future.set_result(AddResult(as_status(result.status), result.message))

    def _fail_pending(self, failure: BookieError) -> None:
        with self._lock:
            self._failure = failure
            pending, self._pending = self._pending, {}
            self._queue, self._queued_bytes = [], 0
            self._has_work.notify_all()
            self._has_room.notify_all()
        for future in pending.values():
            future.set_exception(failure)


def _check_add(ledger_id: int, entry_id: int, master_key: bytes, body: bytes) -> None:
    """Refuse what the wire cannot carry (the bookie judges everything else)."""
    if not 0 <= ledger_id < 2**64 or not -2**63 <= entry_id < 2**63:
        raise InvalidConfigurationError(
            f"ledger id {ledger_id} / entry id {entry_id} out of range: ledger ids are unsigned 64-bit, "
            "entry ids signed 64-bit")
    if not isinstance(master_key, bytes) or not isinstance(body, bytes):
        raise InvalidConfigurationError(
            f"master_key and body must be bytes, got {type(master_key).__name__} and {type(body).__name__}")
