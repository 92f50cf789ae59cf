"""The writer's handle of one ledger: pipelined appends, ensemble changes, explicit LAC and close.

Every decision is the protocol core's (``AddTracker`` for write sets,
confirmation order, the LAC and the entries to re-send; ``add_answers`` for
what each add status means; ``add_timeouts`` for which bookies are silent;
``ledger_rules`` through ``ensemble_change`` / ``metadata_ops`` for
metadata). This module
encodes each entry once (``add_wire.AddEncoder``: the same bytes go to every
bookie of its write set), sends it over the transport, feeds the answers back
-- one event per answer batch of a bookie -- and completes the callers'
futures, in entry order.

The path of one add over ``GrpcTransport``, from ``append_async`` to its future (hand-offs numbered):

* the caller's thread, under ``_lock``: ``AddTracker.add``, the entry encoded once, then
  ``send_adds_to`` its write set: ``AddOutbox.put_all`` appends it to one list per bookie
  (client-side queue 1) and, if the outbox was empty, kicks the network loop --
  (1) caller -> network thread;
* the network thread: ``AddOutbox.flush`` hands each list to its bookie's ``AddStream``
  (client-side queue 2), whose kick -- (2) -- wakes the stream's writer task, which joins the
  queue into one AddBatch and writes it through grpc.aio -- (3) into gRPC's core; the
  AddResultBatch comes back through gRPC's poller -- (4) to the stream's reader task, which
  calls ``_answered`` once per batch;
* ``_answered`` posts to ``WriterEvents``: run at once if ``_lock`` is free, else left queued
  for the thread holding it (usually a caller in ``append_async``) -- (5); the tracker
  releases confirmations in entry order;
* confirmed futures are completed outside the lock by ``OrderedCompletions``, in entry
  order, by whichever thread gets there first -- (6).

Putting adds straight into each ``AddStream``'s queue (one queue per bookie) was measured
against this (issue 15, part 5) and cost more client CPU per
1 KiB entry: the outbox's extra hop makes larger AddBatches.

Threads: answers arrive on the transport's thread, add timeouts and explicit
LAC checks on the client's scheduler, ensemble changes run on the client's
worker pool. All of them post events to ``WriterEvents``, which runs them
under ``_lock`` (re-entrant, since a future may complete inside ``add()``),
one at a time, so a callback never re-enters the tracker half-way. User
futures are completed after the lock is released, by one thread at a time,
in order. An answer FENCED or UNAUTHORIZED is fatal for the writer; TOO_MANY_REQUESTS
(shed load) is sent again after a back-off until ``add_timeout_s`` (``protocol.add_answers``); any other
error status, a broken stream or a silent bookie (``add_timeout_s``; which bookies are silent is
``protocol.add_timeouts``' decision) is a bookie failure and leads to an ensemble change -- or, with
``delay_ensemble_change``, to a degraded bookie while Qa stays reachable
(``degraded_bookies``; logged at INFO once per bookie).

Flapping bookies (issue 12, part 9): every bookie failure is reported to the
client's quarantine, which placement avoids while other bookies are left, and
the changes of a streak are spaced by ``protocol.quarantine.change_delay``
(``ClientConfig.ensemble_change_backoff``). A bookie that fails while the
last change is too recent is reported to the tracker only when the back-off
has passed: until then it counts as a silent bookie does before
``add_timeout_s``, so entries whose write set still has Qa other bookies are
confirmed without it (no change is in progress, so docs/protocol.md W2 does not hold them).
Failures that join a change in progress start the next change after the
back-off. ``ensemble_changes`` counts the changes this writer made.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

from pyspark_ledger.client.add_bookkeeping import OrderedCompletions, WriterEvents
from pyspark_ledger.client.add_stream import AddCallbacks
from pyspark_ledger.client.closing import close_leaving_block
from pyspark_ledger.client.add_wire import AddEncoder, check_payload
from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.ensemble_change import change_ensemble
from pyspark_ledger.client.explicit_lac import LacFlusher
from pyspark_ledger.client.metadata_ops import close_ledger
from pyspark_ledger.client.metadata_update import retry_policy
from pyspark_ledger.client.rpc_errors import BookieStatus, as_status
from pyspark_ledger import entry as entry_format
from pyspark_ledger.entry import HEADER_SIZE, EntryCodec, master_key
from pyspark_ledger.errors import BookieError, LedgerClosedError, LedgerError, LedgerFullError, error_for_status
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.protocol.add_answers import AddAction, action_for_status, busy_retry_delay
from pyspark_ledger.protocol.add_timeouts import UnansweredAdds
from pyspark_ledger.protocol.add_tracker import AddTracker, EnsembleChangeRequest
from pyspark_ledger.protocol.quarantine import change_delay, streak_after_change
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

log = logging.getLogger(__name__)
_DIGEST_ROOM = 32


def _ignore(*_args) -> None:
    return None


class LedgerWriter:
    """Appends to one OPEN ledger (``LedgerClient.create_ledger`` makes one); a context manager."""

    def __init__(self, ctx: ClientContext, created: Versioned[LedgerMetadata], password: bytes,
                 on_close=None) -> None:
        md = created.value
        self._ctx = ctx
        self._current = created
        self._codec = EntryCodec(md.digest_type, password)
        self._key = master_key(password)
        self._encoder = AddEncoder(md.ledger_id, self._key)
        self._ledger_id = md.ledger_id
        self._max_payload = ctx.config.max_entry_bytes - HEADER_SIZE - _DIGEST_ROOM
        self._tracker = AddTracker(md.current_fragment.bookies, md.write_quorum, md.ack_quorum,
                                   delay_ensemble_change=ctx.config.delay_ensemble_change)
        self._lock = threading.RLock()
        self._room = threading.Condition(self._lock)
        self._events = WriterEvents(self._lock, self._complete_futures)
        self._frames: dict[int, bytes] = {}  # entry id -> encoded add, kept until confirmed (for re-sends)
        self._futures: dict[int, Future] = {}
        self._answers = AddCallbacks(self._answered, self._stream_failed)
        self._outstanding = UnansweredAdds()  # send times; which bookies are silent (protocol.add_timeouts)
        self._failed_bookies: set[str] = set()
        self._failure: LedgerError | None = None
        self._closing = False
        self._close_done = threading.Event()
        self._close_error: LedgerError | None = None
        self._done = OrderedCompletions()
        self._metadata_lock = threading.Lock()
        self._on_close = on_close
        self._change_streak = 0
        self._last_change: float | None = None
        self.ensemble_changes = 0
        self._lac_flusher = LacFlusher(ctx, md.ledger_id, self._key, self._events.post, self._lac_snapshot)
        self._timer = ctx.scheduler.call_later(self._sweep_interval(), self._check_timeouts)

    # --- public API -------------------------------------------------------------
    @property
    def ledger_id(self) -> int:
        return self._ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._tracker.last_add_confirmed

    @property
    def length(self) -> int:
        return self._tracker.length

    @property
    def metadata(self) -> LedgerMetadata:
        return self._current.value

    @property
    def degraded_bookies(self) -> tuple[str, ...]:
        """Failed or silent bookies kept in the ensemble (``delay_ensemble_change``), in ensemble order.

        Entries written meanwhile are confirmed without them and keep Qa copies, not Qw.
        """
        with self._lock:
            degraded = self._tracker.degraded_bookies
        self._events.drain()
        return degraded

    def append(self, data: bytes) -> int:
        """Add one entry; returns its id once Qa bookies stored it and every earlier entry is confirmed."""
        return self.append_async(data).result()

    def append_async(self, data: bytes) -> "Future[int]":
        """Queue one entry; the future resolves to its entry id (or fails, e.g. LedgerFencedError).

        Blocks while ``max_inflight_adds`` adds are unconfirmed. Done-callbacks run on
        client threads: keep them short and never wait for this writer in them.
        """
        payload = check_payload(data, self._max_payload)
        with self._lock:
            if not self._has_room():
                self._room.wait_for(self._has_room)
            if self._failure is not None or self._closing:
                self._check_open()
            if self._tracker.next_entry_id > entry_format.MAX_ENTRY_ID:
                raise LedgerFullError(f"ledger {self._ledger_id} reached the largest entry id "
                                      f"({entry_format.MAX_ENTRY_ID}): close it and write to a new ledger")
            future: Future = Future()
            entry_id, lac, length, targets = self._tracker.add(len(payload))
            head = self._codec.encode_head(self._ledger_id, entry_id, lac, length, payload)
            frame = self._frames[entry_id] = self._encoder.encode_pieces(entry_id, head, payload)
            self._futures[entry_id] = future
            now = time.monotonic()
            self._lac_flusher.entry_sent(lac, now)
            self._events.run(self._send_new, targets, entry_id, frame, now)
        self._events.drain()
        if self._done:
            self._complete_futures()
        return future

    def close(self) -> None:
        """Wait (up to ``close_timeout_s``) for adds in flight, then CLOSE the ledger at its LAC.

        Adds still unconfirmed then fail with LedgerClosedError. Idempotent: a second
        call returns, or raises the first call's error again. LedgerFencedError if
        another client recovered (or is recovering) the ledger at another end.
        """
        with self._lock:
            first = not self._closing
            self._closing = True
            self._room.notify_all()
        self._events.drain()
        if not first:
            self._close_done.wait()
            if self._close_error is not None:
                raise self._close_error
            return
        try:
            self._close()
        except LedgerError as exc:
            self._close_error = exc
            raise
        finally:
            self._close_done.set()
            if self._on_close is not None:
                self._on_close(self)

    def abort(self, reason: str = "the client was closed") -> None:
        """Stop without closing the ledger: pending adds fail with LedgerClosedError (client shutdown)."""
        with self._lock:
            self._closing = True
            self._events.run(lambda: self._fail_writer(LedgerClosedError(f"ledger {self.ledger_id}: {reason}")))
        self._events.drain()
        self._timer.cancel()
        self._lac_flusher.cancel()
        self._complete_futures()
        self._close_done.set()

    def __enter__(self) -> "LedgerWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_leaving_block(self.close, exc_type is not None, log, f"ledger {self.ledger_id}")

    # --- close --------------------------------------------------------------------
    def _close(self) -> None:
        deadline = time.monotonic() + self._ctx.config.close_timeout_s
        with self._lock:
            self._room.wait_for(lambda: not self._futures or self._failure is not None,
                                max(0.0, deadline - time.monotonic()))
            self._events.run(lambda: self._stop(LedgerClosedError(
                f"ledger {self.ledger_id} was closed before this add was confirmed")))
        self._events.drain()
        self._timer.cancel()
        self._lac_flusher.cancel()
        self._complete_futures()
        with self._metadata_lock:  # waits for an ensemble change in flight
            with self._lock:
                self._events.run(lambda: None)  # its outcome may still be queued
                current, lac, length = self._current, self._tracker.last_add_confirmed, self._tracker.length
            self._events.drain()
            self._current = close_ledger(self._ctx.store, current, lac, length, retry_policy(self._ctx.config))
        log.debug("ledger %d closed at entry %d", self.ledger_id, lac)

    # --- sending and answers (lock held) --------------------------------------------
    def _send_new(self, bookies: tuple[str, ...], entry_id: int, frame: bytes, now: float) -> None:
        """Send a new entry to its write set; a bookie refusing it at once is a bookie failure."""
        self._outstanding.sent_to_all(bookies, entry_id, now)
        for bookie, error in self._ctx.transport.send_adds_to(bookies, self._ledger_id, ((entry_id, frame),),
                                                               self._answers):
            self._events.queue(lambda bookie=bookie, reason=str(error): self._on_bookie_error(entry_id, bookie,
                                                                                                 reason))

    def _send(self, bookie: str, adds, now: float) -> None:
        """Send ``(entry id, encoded add)`` pairs to one bookie; a refusal is a bookie failure."""
        sent = self._outstanding.sent
        for entry_id, _ in adds:
            sent(bookie, entry_id, now)
        try:
            self._ctx.transport.send_adds(bookie, self.ledger_id, adds, self._answers)
        except LedgerError as exc:
            first, reason = adds[0][0], str(exc)
            self._events.queue(lambda: self._on_bookie_error(first, bookie, reason))

    def _answered(self, bookie: str, results: list) -> None:
        """The add-stream listener (transport thread): one writer event per answer batch of a bookie."""
        self._events.post(lambda: self._on_results(bookie, results))

    def _stream_failed(self, bookie: str, keys: list[tuple[int, int]], error: BookieError) -> None:
        self._events.post(lambda: self._on_failure(bookie, keys, error))

    def _on_results(self, bookie: str, results: list) -> None:
        """One answer batch of a bookie (transport thread): acks, and statuses that end a bookie or the writer."""
        sent = self._outstanding.of(bookie)
        forget = sent.pop if sent is not None else _ignore
        ok, acked = pb.OK, []
        for result in results:
            entry_id = result.entry_id
            sent_at = forget(entry_id, None)
            if result.status == ok:
                acked.append(entry_id)
                continue
            if acked:  # the acks before this answer count first, as they came first
                self._confirm(self._tracker.ack_many(acked, bookie))
                acked = []
            self._on_status(entry_id, bookie, as_status(result.status), result.message, sent_at)
        if acked:
            self._outstanding.acked(bookie)
            self._confirm(self._tracker.ack_many(acked, bookie))

    def _on_status(self, entry_id: int, bookie: str, status: BookieStatus, message: str,
                   sent_at: float | None) -> None:
        action = action_for_status(status.name)  # the decision is the protocol core's (``add_answers``)
        if action is AddAction.FENCED:
            return self._fail_writer(error_for_status(status,
                f"ledger {self.ledger_id} was fenced by another client (bookie {bookie}, entry {entry_id}); "
                "adds not yet confirmed may or may not be in the ledger"))
        if action is AddAction.UNAUTHORIZED:
            return self._fail_writer(error_for_status(status,
                f"bookie {bookie} refused entry {entry_id} of ledger {self.ledger_id}: it holds another master "
                f"key for this ledger id ({message})"))
        if action is AddAction.RETRY and sent_at is not None and self._retry_later(entry_id, bookie, sent_at):
            self._outstanding.shed(bookie, message)
            return None
        self._on_bookie_error(entry_id, bookie, f"{status.name}: {message}",
                              replace_now=action is AddAction.REPLACE_NOW)

    def _retry_later(self, entry_id: int, bookie: str, sent_at: float) -> bool:
        """Send an add the bookie shed to it again after a back-off; False when its time is up (a failure).

        Until then the add stays unanswered with its first send time, so the timeout sweep still ends it."""
        wait = busy_retry_delay(time.monotonic() - sent_at, self._ctx.config.add_timeout_s)
        if wait is None:
            return False
        self._outstanding.sent(bookie, entry_id, sent_at)
        self._ctx.scheduler.call_later(wait, lambda: self._events.post(lambda: self._resend(entry_id, bookie)))
        return True

    def _resend(self, entry_id: int, bookie: str) -> None:
        """The back-off of a shed add ended (lock held): send it again unless it was answered, confirmed or
        moved meanwhile (the bookie failed or was replaced: ``UnansweredAdds`` forgot it)."""
        frame = self._frames.get(entry_id)
        if self._failure is not None or frame is None or not self._outstanding.is_unanswered(bookie, entry_id):
            return
        try:
            self._ctx.transport.send_adds(bookie, self.ledger_id, ((entry_id, frame),), self._answers)
        except LedgerError as exc:
            self._events.queue(lambda reason=str(exc): self._on_bookie_error(entry_id, bookie, reason))

    def _on_failure(self, bookie: str, keys: list[tuple[int, int]], error: BookieError) -> None:
        """The stream to ``bookie`` broke with these adds unanswered (transport thread)."""
        self._on_bookie_error(keys[0][1], bookie, str(error))

    def _on_bookie_error(self, entry_id: int, bookie: str, reason: str, replace_now: bool = False) -> None:
        if self._failure is not None or bookie in self._failed_bookies:
            return
        log.info("ledger %d: add of entry %d to bookie %s failed: %s", self.ledger_id, entry_id, bookie, reason)
        self._failed_bookies.add(bookie)
        self._ctx.quarantine.failed(bookie, reason)
        self._outstanding.forget(bookie)
        wait = self._change_wait()
        if wait > 0:  # a streak of changes: the tracker hears of it after the back-off (see the docstring)
            log.info("ledger %d: bookie %s is replaced after a %.2f s back-off (change %d of a streak)",
                     self.ledger_id, bookie, wait, self._change_streak + 1)
            self._ctx.scheduler.call_later(wait, lambda: self._events.post(
                lambda: self._report_failure(bookie, replace_now)))
            return
        self._report_failure(bookie, replace_now)

    def _report_failure(self, bookie: str, replace_now: bool) -> None:
        request = self._tracker.failed(bookie, replace_now=replace_now)
        if request is not None:
            self._start_change(request)
        elif bookie in self._tracker.degraded_bookies:
            self._log_degraded((bookie,))

    def _change_wait(self) -> float:
        since_last = None if self._last_change is None else self._ctx.clock() - self._last_change
        return change_delay(self._change_streak, since_last, self._ctx.config.ensemble_change_backoff)

    def _log_degraded(self, bookies) -> None:
        """Once per bookie: it failed at most once for this writer, or during a change (logged after it)."""
        quorums = self._tracker.quorums
        for bookie in bookies:
            log.info("ledger %d: bookie %s degraded, not replaced (delay_ensemble_change): entries it has not "
                     "acked are confirmed without it, under-replicated (%d copies, not %d)", self.ledger_id, bookie,
                     quorums.ack_quorum, quorums.write_quorum)

    def _confirm(self, confirmed) -> None:
        frames, futures, push = self._frames, self._futures, self._done.push
        for add in confirmed:
            frames.pop(add.entry_id, None)
            future = futures.pop(add.entry_id, None)
            if future is not None:
                push(future, add.entry_id)
        if confirmed:
            self._room.notify_all()
            self._lac_flusher.lac_moved(self._tracker.last_add_confirmed)

    def _stop(self, error: LedgerError) -> None:
        for entry_id in self._tracker.stop(str(error)):
            self._frames.pop(entry_id, None)
            future = self._futures.pop(entry_id, None)
            if future is not None:
                self._done.push(future, error=error)
        self._room.notify_all()

    def _fail_writer(self, error: LedgerError) -> None:
        if self._failure is None:
            self._failure = error
            log.info("ledger %d: writer stopped: %s", self.ledger_id, error)
        self._stop(error)

    # --- ensemble changes ---------------------------------------------------------
    def _start_change(self, request: EnsembleChangeRequest) -> None:
        exclude = set(self._failed_bookies)
        delay = self._change_wait()
        if delay > 0:  # failures that joined a change in progress: its confirmations wait (W2)
            log.info("ledger %d: ensemble change waits %.2f s (change %d of a streak of failures)", self.ledger_id,
                     delay, self._change_streak + 1)
            self._ctx.scheduler.call_later(delay, lambda: self._events.post(lambda: self._run_change(request,
                                                                                                     exclude)))
            return
        self._run_change(request, exclude)

    def _run_change(self, request: EnsembleChangeRequest, exclude: set[str]) -> None:
        if self._tracker.stopped:
            return
        try:
            self._ctx.run_in_background(lambda: self._change(request, exclude))
        except LedgerError as exc:
            self._fail_writer(exc)

    def _change(self, request: EnsembleChangeRequest, exclude: set[str]) -> None:
        with self._metadata_lock:
            if self._tracker.stopped:
                return
            try:
                changed = change_ensemble(self._ctx, self._current, request, exclude)
            except LedgerError as exc:
                return self._events.post(lambda error=exc: self._fail_writer(error))  # exc is unbound later
            except Exception as exc:  # noqa: BLE001 - surfaced to every pending add, never lost
                error = LedgerClosedError(f"ensemble change of ledger {self.ledger_id} failed: {exc!r}")
                return self._events.post(lambda: self._fail_writer(error))
            self._events.post(lambda: self._changed(changed))

    def _changed(self, changed: Versioned[LedgerMetadata]) -> None:
        now = self._ctx.clock()
        since_last = None if self._last_change is None else now - self._last_change
        self._change_streak = streak_after_change(self._change_streak, since_last,
                                                  self._ctx.config.ensemble_change_backoff)
        self._last_change = now
        self.ensemble_changes += 1
        self._current = changed
        self._failed_bookies.difference_update(changed.value.current_fragment.bookies)  # taken back: watched again
        if self._tracker.stopped:
            return
        outcome = self._tracker.ensemble_changed(changed.value.current_fragment.bookies)
        resends: dict[str, list[tuple[int, bytes]]] = {}
        for resend in outcome.resends:
            for bookie in resend.targets:
                resends.setdefault(bookie, []).append((resend.entry_id, self._frames[resend.entry_id]))
        now = time.monotonic()
        for bookie, adds in resends.items():
            self._send(bookie, adds, now)
        self._confirm(outcome.confirmed)
        if outcome.next_change is not None:
            self._start_change(outcome.next_change)
        else:  # failures that joined this change and may wait (delay_ensemble_change)
            self._log_degraded(self._tracker.degraded_bookies)

    # --- add timeouts -----------------------------------------------------------------
    def _sweep_interval(self) -> float:
        return max(0.01, self._ctx.config.add_timeout_s / 4)

    def _check_timeouts(self) -> None:
        self._events.post(self._time_out)
        with self._lock:
            if not self._tracker.stopped:  # also while close() waits for adds in flight
                self._timer = self._ctx.scheduler.call_later(self._sweep_interval(), self._check_timeouts)
        self._events.drain()

    def _time_out(self) -> None:
        """The sweep: bookies silent (or still shedding) for ``add_timeout_s`` fail -- the core decides which
        (``protocol.add_timeouts``, docs/protocol.md W2, W7)."""
        for silent in self._outstanding.timed_out(time.monotonic(), self._ctx.config.add_timeout_s):
            self._on_bookie_error(silent.entry_id, silent.bookie, silent.reason)

    # --- completions ----------------------------------------------------------------------
    def _complete_futures(self) -> None:
        """Complete finished user futures in entry order, outside the lock."""
        self._done.run()

    # --- checks ---------------------------------------------------------------------------
    def _lac_snapshot(self) -> tuple[int, tuple[str, ...]] | None:
        """For the explicit LAC (lock held): the LAC and the current ensemble, while adds are taken."""
        if self._tracker.stopped or self._closing:
            return None
        return self._tracker.last_add_confirmed, self._tracker.ensemble

    def _has_room(self) -> bool:
        return (len(self._futures) < self._ctx.config.max_inflight_adds or self._failure is not None
                or self._closing)

    def _check_open(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(f"ledger {self.ledger_id} takes no more adds: {self._failure}")
        if self._closing:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed (or closing): it takes no more adds")
