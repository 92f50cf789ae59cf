"""A client-side add stream to one bookie: coalesced sends, answers delivered per received batch.

``AddStream.send(ledger_id, adds, listener)`` queues adds already encoded by
``add_wire`` (one encoding shared by every bookie of the write set) and kicks
the owner's ``IoLoop``; the loop writes whatever is queued as one AddBatch
(up to ``max_batch_bytes``; a large add on its own) whenever the previous
write is done and fewer than ``max_batches_in_flight`` batches of small adds
are unanswered (``batch_window``, docs/protocol.md W10; None, the default: 2 on
a framed call, 1 on gRPC, set once the call is open): adds queued while the
window is full leave together once an answer frees a place, before that
answer reaches its listeners (``stream_answers.StreamAnswers`` keeps the adds in
flight and takes each answer off them). A call that can send without a coroutine
(``write_now``, a framed call, docs/protocol.md W11) is written to straight from
the kick or the answer that let a batch go, while the writing coroutine is idle; a send made on the loop thread
(a writer's) to such a call with nothing unanswered writes its adds itself, before it returns, instead of
kicking: a paced add's first write then waits for no turn of the loop (docs/measurements.md, "Adds written by
the send that queued them, session 28"). For each
AddResultBatch it calls ``listener.on_add_results(bookie_id, results)`` once,
with the ``AddResult`` messages of that listener's adds in the bookie's
durability order. A bookie that answers in runs (docs/protocol.md W9, asked
for by ``BookieClient``) sends OK answers as ``AckRun``s: they go first, to
``listener.on_add_acks(bookie_id, spans)`` with ``(ledger id, range of entry
ids)`` pairs in the bookie's order (a listener without that method gets them
as ``AckedAdd``s through ``on_add_results``); a run longer than the adds in
flight ends the stream. When the stream ends (bookie gone, cancelled, ended by
a draining bookie, closed) each listener gets one ``on_add_failure(bookie_id,
keys, error)`` with every unanswered ``(ledger_id, entry_id)``: those adds may
or may not be stored. Listeners run on the loop thread and must not block.
``add()`` is the one-entry form
returning a ``concurrent.futures.Future`` of an ``AddResult``.

``close()`` half-closes, waits (bounded) for the answers in flight, then
cancels the call.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from operator import itemgetter
from typing import Callable, Sequence

import grpc
import grpc.aio

from pyspark_ledger.client.add_listeners import AddListener
from pyspark_ledger.client.add_queue import AddQueue
from pyspark_ledger.client.add_wire import ADD_OK, AckedAdd, AddResult, FutureAnswers, as_results, encode_add
from pyspark_ledger.client.batch_window import DEFAULT_BATCHES_IN_FLIGHT, BatchWindow, batches_in_flight_for
from pyspark_ledger.client.io_loop import IoLoop
from pyspark_ledger.client.rpc_errors import translate_rpc_error
from pyspark_ledger.client.stream_answers import StreamAnswers
from pyspark_ledger.errors import (AddStreamEndedError, BookieError, BookieUnavailableError, InvalidConfigurationError,
                                   InvalidStateError)
from pyspark_ledger.status import BookieStatus

__all__ = ["ADD_OK", "AckedAdd", "AddResult", "AddStream", "DEFAULT_MAX_BATCH_BYTES", "DEFAULT_MAX_INFLIGHT",
           "as_results"]

log = logging.getLogger(__name__)
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_INFLIGHT = 10_000
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


class AddStream:
    """One AddStream RPC on an IoLoop; thread-safe ``send``/``add``; see the module docstring."""

    def __init__(self, open_call: Callable[[], grpc.aio.StreamStreamCall], bookie_id: str, io_loop: IoLoop, *,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, max_inflight: int = DEFAULT_MAX_INFLIGHT,
                 max_batches_in_flight: int | None = DEFAULT_BATCHES_IN_FLIGHT, tls=None,
                 fallback: Callable[[], grpc.aio.StreamStreamCall] | None = None,
                 on_fallback: Callable[[BookieError], None] | None = None) -> None:
        if max_batch_bytes < 1 or max_inflight < 1:
            raise InvalidConfigurationError("max_batch_bytes and max_inflight must be positive")
        # touched on the loop thread only; its limit is set again once the call is open, as its transport asks
        self._window = BatchWindow(batches_in_flight_for(max_batches_in_flight, False))
        self._window_chosen = max_batches_in_flight
        self.bookie_id = bookie_id
        self._tls = tls  # the client's ClientTls, to explain a failed handshake
        self._io = io_loop
        self._lock = threading.Lock()
        self._queue = AddQueue(max_batch_bytes)
        self._answers = StreamAnswers(bookie_id, self._lock, max_inflight)  # the adds in flight and whose they are
        self._closing = False
        self._failure: BookieError | None = None
        self._ended = threading.Event()
        self._call: grpc.aio.StreamStreamCall | None = None
        self._wakeup: asyncio.Event | None = None
        self._writer_idle = False  # the writing coroutine waits for ``_wakeup``: ``_write_now`` may write
        self._answers_ended = False
        self._futures = FutureAnswers()
        self._fallback, self._on_fallback = fallback, on_fallback
        io_loop.spawn(self._run(open_call))

    @property
    def pending(self) -> int:
        """Adds sent or queued and not yet answered."""
        return len(self._answers)

    @property
    def closed(self) -> bool:
        """True once the stream ended (closed, failed or ended by the bookie): it takes no more adds."""
        return self._failure is not None

    def send(self, ledger_id: int, adds: Sequence[tuple[int, bytes]], listener: AddListener) -> None:
        """Queue ``(entry_id, encoded add)`` pairs of one ledger; answers go to ``listener``.

        Blocks while ``max_inflight`` adds are unanswered (never on the loop thread).
        BookieUnavailableError, with nothing queued, if the stream has ended.
        """
        on_loop = self._io.in_loop_thread()
        with self._lock:
            if not on_loop:
                self._answers.wait_for_room(lambda: self._closing or self._failure is not None)
            if self._failure is not None or self._closing:
                raise self._ended_error()
            repeated = self._answers.register(ledger_id, list(map(_FIRST, adds)), listener)
            if repeated is not None:  # in flight already, or twice in this send: none of them is registered
                self._refuse_repeat(ledger_id, repeated)
            was_empty = not self._queue
            self._queue.extend(list(map(_SECOND, adds)))
        if was_empty:
            if self._writer_idle and on_loop and not self._window.unanswered and self._write_now():
                return  # an idle stream sent to from the loop: written now, not a turn of the loop later
            self._io.kick(id(self), self._flush)

    def _refuse_repeat(self, ledger_id: int, entry_id: int) -> None:
        raise InvalidStateError(
            f"ledger {ledger_id} entry {entry_id} is already in flight on this stream to bookie "
            f"{self.bookie_id} (or twice in one send): wait for its answer before re-sending it")

    def add(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
            recovery: bool = False) -> "Future[AddResult]":
        """Queue one add; its Future resolves to the bookie's ``AddResult`` (or fails if the stream breaks)."""
        frame = encode_add(ledger_id, entry_id, master_key, body, recovery)
        future = self._futures.expect(ledger_id, entry_id)
        try:
            self.send(ledger_id, ((entry_id, frame),), self._futures)
        except BookieUnavailableError as exc:
            self._futures.on_add_failure(self.bookie_id, [(ledger_id, entry_id)], exc)
        except BaseException:
            self._futures.forget(ledger_id, entry_id)
            raise
        return future

    def close(self, timeout: float = 10.0) -> None:
        """Half-close, wait up to ``timeout`` for answers in flight, then cancel the call."""
        with self._lock:
            self._closing = True
            self._answers.wake_all()
        self._io.kick(id(self), self._flush)
        if self._io.in_loop_thread() or self._ended.wait(timeout):
            return
        try:
            self._io.call_soon(self._cancel)
        except BookieUnavailableError:
            pass  # the loop is gone: nothing more can arrive
        if not self._ended.wait(timeout):
            log.warning("add stream to bookie %s did not end after cancel", self.bookie_id)
            self._fail_pending(self._closed_error())

    def __enter__(self) -> "AddStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- on the loop thread ----------------------------------------------------------
    async def _run(self, open_call: Callable[[], grpc.aio.StreamStreamCall]) -> None:
        failure: BookieError | None = None
        try:
            self._wakeup = asyncio.Event()
            self._wakeup.set()  # send whatever was queued before the loop got here
            self._call = call = open_call()
            call = await self._opened(call)  # a framed call that cannot connect may give way to gRPC
            self._window.limit = batches_in_flight_for(self._window_chosen, getattr(call, "framed", False))
            reader = asyncio.ensure_future(self._read_answers(call))
            write_failed = await self._write_batches(call)
            failure = await reader
            if write_failed and failure is not None and not isinstance(failure, BookieUnavailableError):
                # grpc.aio reports a send that failed on a broken connection as INTERNAL
                failure = BookieUnavailableError(
                    f"add stream to bookie {self.bookie_id} broke while sending: {failure}", bookie_id=self.bookie_id,
                    status=BookieStatus.UNAVAILABLE)
        except asyncio.CancelledError:
            self._cancel()
            failure = self._closed_error()
        except Exception as exc:  # noqa: BLE001 - every pending add must learn the stream is gone
            self._cancel()
            failure = exc if isinstance(exc, BookieError) else BookieError(
                f"add stream to bookie {self.bookie_id} failed: {exc!r}", bookie_id=self.bookie_id,
                status=BookieStatus.RPC_FAILED)
        finally:
            if failure is None:  # the bookie ended the stream cleanly (an END with OK): docs/protocol.md W2
                failure = self._closed_error() if self._closing else AddStreamEndedError(
                    f"bookie {self.bookie_id} ended the add stream before answering every add",
                    bookie_id=self.bookie_id)  # UNAVAILABLE, its default status
            self._fail_pending(failure)
            self._ended.set()

    async def _opened(self, call):
        """``call``, connected first when it can connect ahead of its first write (a framed call) and a fallback
        was given: a framed port that cannot be reached at all (``FramedCall.fallback_ok``: nothing was sent)
        gives way to the fallback call (the bookie's gRPC port, docs/protocol.md W11), and ``on_fallback`` hears
        why. Any other failure to connect is the stream's."""
        opening = getattr(call, "open", None)
        if opening is None or self._fallback is None:
            return call
        try:
            await opening()
        except BookieError as exc:
            if not getattr(call, "fallback_ok", False):
                raise
            if self._on_fallback is not None:
                self._on_fallback(exc)
            self._call = call = self._fallback()
        return call

    def _flush(self) -> None:
        if self._writer_idle and self._write_now():
            return
        if self._wakeup is not None:
            self._wakeup.set()

    def _write_now(self) -> bool:
        """Write what the window lets go straight to a call that can send at once (loop thread, writing coroutine
        idle); False when the coroutine must take over (no such call, the call cannot send now, or closing)."""
        call = self._call
        may_write = getattr(call, "may_write_now", None)
        if may_write is None:
            return False
        while True:
            if not may_write():
                return False
            with self._lock:
                if self._failure is not None or self._closing:
                    return False
                batch = self._queue.take(self._window)
            if batch is None:
                return True
            call.write_now(batch)

    def _cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()

    async def _write_batches(self, call: grpc.aio.StreamStreamCall) -> bool:
        """Write queued adds, one AddBatch per write, until closing (then half-close) or failed.

        True if a write failed (the call had ended)."""
        while True:
            self._writer_idle = True
            try:
                await self._wakeup.wait()
            finally:
                self._writer_idle = False
            self._wakeup.clear()
            if self._answers_ended:
                return False  # the bookie ended the call: the reader reports how
            while True:
                with self._lock:
                    if self._failure is not None:
                        return False
                    batch = self._queue.take(self._window)
                    closing, drained = self._closing, not self._queue
                if batch is None:
                    break
                try:
                    await call.write(batch)
                except (grpc.RpcError, asyncio.InvalidStateError, BookieError):
                    return True  # the call ended: the reader reports why
            if closing and drained:  # else the answers that free the window wake this loop again
                try:
                    await call.done_writing()
                except (grpc.RpcError, asyncio.InvalidStateError, BookieError):
                    return True
                return False

    async def _read_answers(self, call: grpc.aio.StreamStreamCall) -> BookieError | None:
        """Deliver answers until the bookie ends the stream; the error that ended it, if any."""
        try:
            if getattr(call, "answers_to", None) is not None:  # a framed call: answers taken as they arrive
                return await self._take_answers_as_they_arrive(call)
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return None
                answered = self._answers.take(response)
                try:
                    if self._let_held_adds_go(answered.count):  # the writer's turn comes before the listeners
                        await asyncio.sleep(0)  # run, so the bookie is not kept waiting on them
                finally:
                    self._answers.deliver(answered)
        except grpc.RpcError as exc:
            return translate_rpc_error(exc, self.bookie_id, "add stream", self._tls)
        except BookieError as exc:  # a framed call's failure (docs/protocol.md W11), or a malformed answer
            call.cancel()
            return exc
        finally:
            self._answers_ended = True
            self._wakeup.set()  # the writer stops too

    async def _take_answers_as_they_arrive(self, call) -> None:
        """``_read_answers`` for a framed call, which hands answers over as their bytes arrive (``answers_to``):
        each is delivered in the loop's turn that received it, with no task to wake per answer. The call's
        failure is raised here, as ``call.read`` raises it. A batch the answer lets go is written before the
        listeners run (the writing coroutine of a framed call is idle unless it waits for the socket to drain)."""
        await call.open()
        ended = asyncio.get_running_loop().create_future()

        def arrived() -> None:
            try:
                while not ended.done():
                    response = call.read_nowait()
                    if response is None:
                        return
                    if response is grpc.aio.EOF:
                        ended.set_result(None)
                        return
                    answered = self._answers.take(response)
                    try:
                        self._let_held_adds_go(answered.count)
                    finally:
                        self._answers.deliver(answered)
            except Exception as exc:  # noqa: BLE001 - raised by the reading coroutine, as read() raises it
                if not ended.done():
                    ended.set_exception(exc)
        call.answers_to(arrived)
        try:
            await ended
        finally:
            call.answers_to(None)

    def _let_held_adds_go(self, answered: int) -> bool:
        """After an answer to ``answered`` adds: batches the window held back (docs/protocol.md W10) leave, written
        at once where the call can take them, else by the writing coroutine, woken: True then."""
        if not (self._window.answered(answered) and self._queue):
            return False
        if self._writer_idle and self._write_now():
            return False
        self._wakeup.set()
        return True

    def _fail_pending(self, failure: BookieError) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = failure
            failure = self._failure
            pending = self._answers.take_all()
            self._queue.clear()
        self._answers.fail(pending, failure)

    def _ended_error(self) -> BookieUnavailableError:
        """Why a new add cannot go on this stream (lock held)."""
        if self._failure is None:
            return self._closed_error()
        return BookieUnavailableError(f"add stream to bookie {self.bookie_id} has ended: {self._failure}",
                                      bookie_id=self.bookie_id, status=self._failure.status
                                      if isinstance(self._failure, BookieUnavailableError) else BookieStatus.CLOSED)

    def _closed_error(self) -> BookieUnavailableError:
        return BookieUnavailableError(f"add stream to bookie {self.bookie_id} is closed", bookie_id=self.bookie_id,
                                      status=BookieStatus.CLOSED)
