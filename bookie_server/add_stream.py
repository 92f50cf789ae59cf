"""One AddStream call: adds read on a dedicated thread, answered as they become durable.

The gRPC handler thread runs ``AddStreamSession.responses``: it starts a
reader thread that takes each AddBatch (decoded by ``add_wire.decode_add_batch``: large bodies are views of
the received bytes, never copied), checks it (adds per batch, then each
add's ids, master key and size: ``limits``), admits up to
``max_inflight_adds`` adds whose bytes fit the bookie-wide in-flight byte
budget (``--max-inflight-bytes``; past it they are answered
TOO_MANY_REQUESTS at once) and hands them to ``storage.add_entries_then`` as one
batch. Every add needs its ledger's master key (``authorization``): one without is answered
UNAUTHORIZED, except an administrator's recovery write-back of a ledger this bookie stores (the stream's
caller is checked once, when it opens). While the stream's own adds in flight hold ``--max-stream-inflight-bytes``
or more, the reader takes no next batch (gRPC flow control then holds the
sender back). A batch with more than ``--max-batch-adds`` adds ends the
stream with INVALID_ARGUMENT (answering each add would cost more than the
batch). When a batch's future completes (on the
journal thread) its statuses are queued; the handler thread merges whatever
is queued into one AddResultBatch (and frees their in-flight slots), its OK answers
as runs when the client asked (docs/protocol.md W9). On a plaintext framed connection
(``answer_sender``) the journal thread answers a batch itself when the socket takes the bytes at once and
the handler thread is not sending (``answer_outbox``): one thread hand-off less per add. Answers
therefore come in durability order, not request order, and never block the
journal thread.

The stream ends when the client half-closes (after the last answer), when the
client cancels, when it stayed idle (nothing sent, nothing in flight) for
``--add-stream-idle-timeout``, or when the bookie drains (after the in-flight adds are
answered; later adds get READ_ONLY "shutting down").
"""
from __future__ import annotations

import logging
import operator
import queue
import threading
import time
from typing import Callable, Iterator

import grpc

from bookie_server.add_checks import sort_adds
from bookie_server.add_wire import ReceivedBatch
from bookie_server.answer_outbox import AnswerOutbox, AnswerSender
from bookie_server.add_refusals import describe_refusal, log_storage_refusals
from bookie_server.limits import (ADD_OVERHEAD_BYTES, Budget, InflightLimiter, StreamLimits, add_cost, check_batch,
                                   refusal_over_budget)
from bookie_server.metrics import STATUS_NAMES, BookieMetrics
from bookie_server.storage import BookieStorage
from pyspark_ledger.wire.ack_runs import PerAddBuilder, RunBuilder
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

_log = logging.getLogger(__name__)
_WAKE = object()
_REFUSED = "refused"
_STORED = "stored"
READER_JOIN_TIMEOUT_S = 5.0
BACKPRESSURE_POLL_S = 0.5  # a reader held back re-checks the end of the call this often
_LEDGER, _ENTRY, _BODY = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(3)  # of an add tuple


class AddStreamSession:
    """State of one AddStream RPC (see the module docstring)."""

    def __init__(self, storage: BookieStorage, metrics: BookieMetrics, *, bookie_id: str,
                 limits: StreamLimits, bookie_bytes: Budget | None = None, peer: str = "",
                 on_bytes_freed: Callable[[int], None] | None = None, ledger_guard=None,
                 admin: bool = False, answer_runs: bool = False, answer_sender: AnswerSender | None = None) -> None:
        self._storage = storage
        self._metrics = metrics
        self._bookie_id = bookie_id
        self._limits = limits
        self._max_entry_size = limits.max_entry_size
        self._limiter = InflightLimiter(limits.max_inflight_adds)
        self._bookie_bytes = bookie_bytes if bookie_bytes is not None else Budget(2**62)
        self._on_bytes_freed = on_bytes_freed
        self._held = 0  # bytes charged for this stream's adds in flight (bookie-wide budget and back-pressure)
        self._held_closed = False  # the call ended: what is admitted later is given back at once
        self._refusals_held = 0  # refusal answers queued and not yet sent (stream back-pressure only)
        self._room_lock = threading.Lock()  # taken alone where nobody is woken (a C-level ``with``)
        self._room = threading.Condition(self._room_lock)
        self._room_waiters = 0  # readers waiting for room: only then does freeing bytes notify
        self._peer = peer
        self._guard = ledger_guard  # bookie_server.ledger_guard.LedgerGuard or None
        self._admin = admin  # the caller is an --admin-identity (decided once per stream)
        self._answer_runs = answer_runs  # OK answers as AckRuns (docs/protocol.md W9)
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._reader_done = False
        self._rpc_done = False
        self._abort: str | None = None
        self.ended_idle = False  # the bookie ended the stream after the idle timeout
        self._last_batch = time.monotonic()
        self.reader: threading.Thread | None = None
        # a plaintext framed connection: the journal thread may answer at once (answer_outbox)
        self._outbox = None if answer_sender is None else AnswerOutbox(answer_sender, self._take_all, self._answers)

    # --- the handler thread --------------------------------------------------------
    def responses(self, request_iterator: Iterator[ReceivedBatch], context: grpc.ServicerContext
                  ) -> Iterator[pb.AddResultBatch]:
        """Yield result batches until the stream is over; starts the reader thread."""
        if not context.add_callback(self._on_rpc_done):
            self._rpc_done = True  # the call already ended
        self.reader = threading.Thread(target=self._read_requests, args=(request_iterator,),
                                       name=f"add-stream-reader {self._peer}", daemon=True)
        self.reader.start()
        try:
            while not self._finished():
                if self._outbox is not None:  # it sends the answers itself; nothing is yielded
                    if not self._wait_for_answers():
                        self._end_idle()
                        break
                    self._outbox.send()
                    continue
                items = self._take_queued()
                if items is None:  # idle for the idle timeout: end the stream (the client opens a new one)
                    self._end_idle()
                    break
                yield from self._answers(items)
            if self._abort is not None and not self._rpc_done:
                _log.info("ending add stream from %s: %s", self._peer, self._abort)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"BAD_REQUEST: {self._abort}")
        finally:
            self._free_held()
        if not context.is_active():
            # gRPC already ended the call (e.g. it aborted it on an undecodable AddBatch). Returning now
            # would make gRPC send a second status, which never completes and hangs server shutdown;
            # one more (unsent) response makes its loop stop instead.
            yield pb.AddResultBatch()

    def _end_idle(self) -> None:
        _log.info("ending add stream from %s: idle for %.0f s (--add-stream-idle-timeout)", self._peer,
                  self._limits.idle_timeout_s)
        self.ended_idle = True

    def drain(self) -> None:
        """Stop admitting adds; the stream ends once the admitted ones are answered."""
        self._limiter.close()
        self._queue(_WAKE)

    def _queue(self, item) -> None:
        """Queue ``item`` for the handler thread, and wake it."""
        self._results.put(item)
        if self._outbox is not None:
            self._outbox.notify()

    def join_reader(self, timeout: float = READER_JOIN_TIMEOUT_S) -> bool:
        """Join the reader thread; False if it is still blocked after ``timeout``."""
        if self.reader is None:
            return True
        self.reader.join(timeout)
        return not self.reader.is_alive()

    def _finished(self) -> bool:
        if self._rpc_done:
            return True
        idle = self._limiter.count == 0 and self._results.empty()
        if self._outbox is not None and self._outbox.holding:
            idle = False  # bytes of answers still wait to be sent
        return idle and (self._reader_done or self._limiter.drained())

    def _take_queued(self) -> list | None:
        """What the queue holds (waiting for one item); None once the stream was idle for the idle timeout."""
        timeout = self._limits.idle_timeout_s
        if timeout <= 0:
            items = [self._results.get()]
        else:
            while True:
                try:
                    items = [self._results.get(timeout=timeout)]
                    break
                except queue.Empty:
                    if self._limiter.count == 0 and time.monotonic() - self._last_batch >= timeout:
                        return None
        return items + self._take_all()

    def _wait_for_answers(self) -> bool:
        """Wait until the outbox has something to send; False once the stream was idle for the idle timeout."""
        timeout = self._limits.idle_timeout_s
        if timeout <= 0:
            return self._outbox.wait(None)
        while not self._outbox.wait(timeout):
            if self._limiter.count == 0 and time.monotonic() - self._last_batch >= timeout:
                return False
        return True

    def _take_all(self) -> list:
        """Everything queued, in order (without waiting)."""
        items = []
        while not self._results.empty():
            items.append(self._results.get_nowait())
        return items

    def _answers(self, items: list) -> list[pb.AddResultBatch]:
        """The messages answering ``items`` in their order: OK adds as runs to a client that asked for them
        (docs/protocol.md W9), else one ``AddResult`` per add."""
        builder = RunBuilder() if self._answer_runs else PerAddBuilder()
        ok = pb.OK
        for item in items:
            if item is _WAKE:
                continue
            if item[0] == _REFUSED:
                for answer in item[1]:
                    builder.refused(*answer)
                self._refusals_answered(len(item[1]))
                continue
            _, ops, statuses, error, cost = item
            self._limiter.release(len(ops))  # freed by the thread that checks _finished(), with the answers
            self._free(cost)
            if statuses.count(ok) == len(statuses):
                builder.acked(list(map(_LEDGER, ops)), list(map(_ENTRY, ops)))
                continue
            for op, status in zip(ops, statuses):
                if status == ok:
                    builder.acked([op[0]], [op[1]])
                else:
                    builder.refused(op[0], op[1], status, error or self._describe(op, status))
        return builder.messages()

    def _refusals_answered(self, count: int) -> None:
        with self._room:
            self._refusals_held -= count * ADD_OVERHEAD_BYTES
            self._room.notify()

    def _free(self, cost: int) -> None:
        """Give back the bytes of answered adds; wake a reader held back by the stream's byte limit."""
        with self._room_lock:
            self._held -= cost
            if self._room_waiters:
                self._room.notify()
        left = self._bookie_bytes.give_back(cost)
        if left == 0 and self._on_bytes_freed is not None:
            self._on_bytes_freed(cost)

    def _free_held(self) -> None:
        """At the end of the call: give back what the unanswered adds still hold (they finish regardless)."""
        with self._room:
            held, self._held = self._held, 0
            self._held_closed = True
            self._room.notify_all()
        if held:
            self._bookie_bytes.give_back(held)

    def _describe(self, op: tuple, status: int) -> str:
        return describe_refusal(op[0], op[1], op[2], op[3], status, self._bookie_id, self._storage.read_only)

    def _on_rpc_done(self) -> None:
        self._rpc_done = True
        self._queue(_WAKE)
        with self._room:
            self._room.notify_all()

    # --- the reader thread ---------------------------------------------------------
    def _read_requests(self, request_iterator: Iterator[ReceivedBatch]) -> None:
        try:
            for batch in request_iterator:
                self._last_batch = time.monotonic()
                problem = check_batch(len(batch.adds), self._limits.max_batch_adds)
                if problem is not None:
                    self._metrics.adds_refused(pb.BAD_REQUEST, len(batch.adds))
                    self._abort = problem
                    if self._on_bytes_freed is not None:
                        self._on_bytes_freed(add_cost(batch.nbytes, len(batch.adds)))
                    return
                self._take_batch(batch)
                del batch
                self._wait_for_room()
        except grpc.RpcError:
            _log.debug("add stream from %s cancelled by the client", self._peer)
        except Exception:  # noqa: BLE001 - a bad stream must never take the bookie down
            _log.exception("add stream from %s failed; closing it", self._peer)
        finally:
            self._reader_done = True
            self._queue(_WAKE)

    def _wait_for_room(self) -> None:
        """Back-pressure: take no next batch while this stream's adds in flight hold its byte limit."""
        limit = self._limits.max_stream_inflight_bytes
        if self._held + self._refusals_held < limit:
            return
        with self._room:
            self._room_waiters += 1
            try:
                while (self._held + self._refusals_held >= limit and not self._rpc_done
                       and not self._limiter.drained()):
                    self._room.wait(BACKPRESSURE_POLL_S)
            finally:
                self._room_waiters -= 1

    def _take_batch(self, batch: ReceivedBatch) -> None:
        """Check each add, admit the well-formed ones and submit them as one storage batch.

        The whole decoded batch is charged to the bookie-wide byte budget while it is checked (all its adds
        are answered TOO_MANY_REQUESTS when it does not fit); the admitted adds keep their part until answered.
        Adds become plain (ledger id, entry id, master key, body, recovery) tuples (``add_checks.sort_adds``).
        Bodies decoded in place keep the whole received batch alive: when only some of its adds are admitted,
        theirs are copied out, so that what the admitted adds hold is what they are charged."""
        started = time.monotonic()
        adds = batch.adds
        whole = add_cost(batch.nbytes, len(adds))
        if not self._bookie_bytes.try_take(whole):
            message = refusal_over_budget("bytes of adds not yet durable", self._bookie_bytes.limit,
                                          "--max-inflight-bytes")
            self._refuse([(add.ledger_id, add.entry_id, pb.TOO_MANY_REQUESTS, message) for add in adds])
            return
        cost = 0
        try:
            ops, refused, size = sort_adds(adds, self._max_entry_size, self._admin_key)
            if ops and self._guard is not None:  # adds of ledgers with no state here: checked against metadata
                kept = self._guard.filter_adds(ops, refused)
                if len(kept) < len(ops):
                    ops, size = kept, sum(len(op[3]) for op in kept)
            ops, cost = self._admit(ops, refused, size)
            if batch.in_place and 0 < len(ops) < len(adds):
                ops = [(op[0], op[1], op[2], bytes(op[3]), op[4]) for op in ops]
        finally:
            self._bookie_bytes.give_back(whole - cost)  # the admitted adds keep ``cost`` until answered
        if refused:
            self._refuse(refused)
        if ops:
            self._submit(ops, started, cost)

    def _admin_key(self, ledger_id: int) -> bytes | None:
        """The stored key for an administrator's key-less recovery write-back of a ledger this bookie stores
        (counted as an admin request), else None (the add is refused UNAUTHORIZED)."""
        if not self._admin:
            return None
        key = self._storage.stored_key(ledger_id)
        if key is not None:
            self._metrics.admin_served("add")
        return key

    def _admit(self, ops: list[tuple], refused: list, size: int) -> tuple[list[tuple], int]:
        """Take in-flight slots for ``ops``: the admitted ones and their cost (already charged with the whole
        batch); the rest are refused (TOO_MANY_REQUESTS past the stream's count, READ_ONLY when draining)."""
        if not ops:
            return ops, 0
        granted = self._limiter.try_acquire(len(ops))
        if granted is None:
            message = f"bookie {self._bookie_id} is shutting down and takes no more adds"
            refused.extend((op[0], op[1], pb.READ_ONLY, message) for op in ops)
            return [], 0
        if granted < len(ops):
            message = (f"more than {self._limiter.limit} adds in flight on this stream "
                       f"(--max-inflight-adds): wait for answers and retry")
            refused.extend((op[0], op[1], pb.TOO_MANY_REQUESTS, message) for op in ops[granted:])
            size = sum(len(op[3]) for op in ops[:granted])
            ops = ops[:granted]
        cost = add_cost(size, len(ops))
        with self._room_lock:
            if self._held_closed:  # the call ended while this batch was checked: nobody frees it later
                return ops, 0
            self._held += cost
        return ops, cost

    def _refuse(self, refused: list[tuple[int, int, int, str]]) -> None:
        first = refused[0]
        _log.info("refused %d add(s) from %s, first: ledger %d entry %d %s: %s", len(refused), self._peer,
                  first[0], first[1], STATUS_NAMES.get(first[2]), first[3])
        for _, _, status, _ in refused:
            self._metrics.adds_refused(status, 1)
            if status == pb.UNAUTHORIZED:
                self._metrics.unauthorized("add")
        with self._room:  # unsent answers count against the stream's bytes: a client that reads no answers
            self._refusals_held += len(refused) * ADD_OVERHEAD_BYTES  # is not read from either
        self._queue((_REFUSED, refused))

    def _submit(self, ops: list[tuple], started: float, cost: int) -> None:
        self._metrics.adds_submitted(len(ops))
        answered = []  # the batch is answered once: by on_done, or by the failure below, whichever comes first

        def on_done(statuses: list[int]) -> None:
            if not answered:
                answered.append(True)
                self._stored(ops, started, statuses, "", cost)
        try:
            self._storage.add_entries_then(ops, on_done)
        except Exception as exc:  # noqa: BLE001 - storage closed or broken: answer, never crash
            _log.error("storage refused a batch of %d adds (ledger %d entry %d first): %s",
                       len(ops), ops[0][0], ops[0][1], exc)
            if not answered:
                answered.append(True)
                self._stored(ops, started, [pb.IO_ERROR] * len(ops), f"bookie storage failed: {exc}", cost)

    def _stored(self, ops: list[tuple], started: float, statuses: list[int], error: str, cost: int) -> None:
        if statuses.count(pb.OK) == len(statuses):
            stored_bytes = sum(map(len, map(_BODY, ops)))
        else:
            stored_bytes = sum(len(op[3]) for op, status in zip(ops, statuses) if status == pb.OK)
            unauthorized = statuses.count(pb.UNAUTHORIZED)
            if unauthorized:
                self._metrics.unauthorized("add", unauthorized)
            log_storage_refusals(self._peer, ops, statuses)
        self._metrics.adds_completed(statuses, time.monotonic() - started, stored_bytes)
        item = (_STORED, ops, statuses, error, cost)
        if self._outbox is not None and self._outbox.offer(item):  # answered from this (the committing) thread
            if self._reader_done or self._limiter.drained() or self._rpc_done:
                self._queue(_WAKE)  # the handler sees whether the stream is over
            return
        self._queue(item)  # one put: one wake-up of the handler thread
