"""The writer's handle of one ledger: pipelined appends, ensemble changes, explicit LAC and close.

Every decision is the protocol core's (``AddTracker`` for write sets,
confirmation order, the LAC and the entries to re-send; ``add_answers`` for
what each add status means; ``add_timeouts`` for which bookies are silent;
``ledger_rules`` through ``ensemble_change`` / ``metadata_ops`` for
metadata). This module encodes each entry once (``add_wire.AddEncoder``: the
same bytes go to every bookie of its write set), sends it over the transport,
feeds the answers back -- one event per answer batch of a bookie -- and
completes the callers' futures, in entry order.

One thread owns a writer's state: the transport's network thread
(``add_bookkeeping.WriterOwner``). Callers only hand their entries over;
answers, add timeouts (client scheduler), explicit LAC checks and the
outcomes of ensemble changes (client worker pool) all become events on that
thread, one at a time (close, abort and ``degraded_bookies`` step in on their
own thread while the owner runs nothing), so an add takes no lock of the
writer's state and a callback never re-enters the tracker half-way.

The path of one add over ``GrpcTransport``, from ``append_async`` to its future (hand-offs numbered):

* the caller's thread, under one small lock (``_submit``): the payload checked, a slot of
  ``max_inflight_adds`` taken, the entry given the next id and encoded once (the same bytes go
  to every bookie) and put in the writer's inbox; if the inbox was empty, the network loop is
  woken -- (1) caller -> network thread;
* the network thread takes up to 256 entries from the inbox per turn of the loop:
  one ``AddTracker.add_many`` (its ids must be the ones encoded), one ``send_adds`` per bookie with
  those entries, straight into the bookie's ``AddStream`` queue (the transport skips its
  ``AddOutbox`` on that thread); the stream's writer task joins the queue into one AddBatch in
  the next turn of the same loop and writes it -- (2) into gRPC's core, whose poller thread
  also receives the AddResultBatch -- (3) back to the stream's reader task on the network
  thread, whose answer event runs at once (it is the owner: no hand-off); the tracker releases
  confirmations in entry order (``ack_range``: one range per answer batch) and the futures are
  completed there, in entry order (``add_futures.complete_all``) -- (4) to a caller in ``result()``.

Three hand-offs between threads before the future completes, one client-side queue per bookie plus
the writer's inbox, whose chunks make the AddBatches. Measured in ``docs/measurements.md`` ("One owner
thread per writer", "The 1 KiB row: client CPU per entry, session 12").

An answer FENCED or UNAUTHORIZED is fatal for the writer; TOO_MANY_REQUESTS (shed load) is sent
again after a back-off until ``add_timeout_s`` (``protocol.add_answers``); any other error
status, a broken stream or a silent bookie (``add_timeout_s``; which bookies are silent is
``protocol.add_timeouts``' decision) is a bookie failure, handled by ``writer_changes`` (ensemble
changes, degraded bookies, the back-off of flapping bookies).
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from operator import itemgetter

from pyspark_ledger import entry as entry_format
from pyspark_ledger.client.add_bookkeeping import OrderedCompletions, WriterOwner
from pyspark_ledger.client.add_futures import new_future
from pyspark_ledger.client.add_listeners import AddCallbacks
from pyspark_ledger.client.add_wire import AddEncoder, check_payload
from pyspark_ledger.client.closing import close_leaving_block
from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.explicit_lac import LacFlusher
from pyspark_ledger.client.io_loop import acquire_io_loop, release_io_loop
from pyspark_ledger.client.metadata_ops import close_ledger
from pyspark_ledger.client.metadata_update import retry_policy
from pyspark_ledger.client.writer_answers import AddAnswers
from pyspark_ledger.client.writer_changes import EnsembleChanges
from pyspark_ledger.entry import HEADER_SIZE, EntryCodec, master_key
from pyspark_ledger.errors import (BookieUnavailableError, InternalError, LedgerClosedError, LedgerError,
                                   LedgerFullError)
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.protocol.add_timeouts import UnansweredAdds
from pyspark_ledger.protocol.add_tracker import AddTracker

log = logging.getLogger(__name__)
_DIGEST_ROOM = 32
_CHUNK_ADDS = 256  # entries the owner takes from the inbox per turn of the loop (then the streams write them)
_SIZE, _FRAME, _FUTURE = itemgetter(1), itemgetter(3), itemgetter(4)  # of an inbox item


class LedgerWriter(AddAnswers, EnsembleChanges):
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
        self._max_inflight = ctx.config.max_inflight_adds
        self._tracker = AddTracker(md.current_fragment.bookies, md.write_quorum, md.ack_quorum,
                                   delay_ensemble_change=ctx.config.delay_ensemble_change)
        loop = getattr(ctx.transport, "io_loop", None)  # the transport's network thread owns the writer
        self._own_loop = loop is None
        self._owner = WriterOwner(acquire_io_loop() if loop is None else loop, self._complete_futures)
        # callers' side: the inbox, the slots of max_inflight_adds, the next entry id (under _submit)
        self._submit = threading.Lock()
        self._inbox: list[tuple[int, int, int, bytes, Future]] = []  # (entry id, size, LAC carried, add, future)
        self._next_id, self._next_length = self._tracker.next_entry_id, self._tracker.length
        self._lac_hint = self._tracker.last_add_confirmed  # the owner's LAC, read by callers for the header
        self._admitted = 0  # futures handed out (callers, under _submit)
        self._released = 0  # of those, confirmed or failed (owner)
        self._room = threading.Condition(threading.Lock())
        self._room_waiters = 0
        # the owner's side
        self._frames: dict[int, bytes] = {}  # entry id -> encoded add, kept until confirmed (for re-sends)
        self._futures: dict[int, Future] = {}
        self._answers = AddCallbacks(self._answered, self._stream_failed, self._acked_runs)
        self._outstanding = UnansweredAdds()  # send times; which bookies are silent (protocol.add_timeouts)
        self._failed_bookies: set[str] = set()
        self._sent_again: set[tuple[str, int]] = set()  # re-sent after a clean end (docs/protocol.md W2)
        self._failure: LedgerError | None = None
        self._closing = False
        self._close_done = threading.Event()
        self._close_error: LedgerError | None = None
        self._done = OrderedCompletions()
        self._metadata_lock = threading.Lock()
        self._on_close = on_close
        self._change_streak = 0
        self._last_change: float | None = None
        self._lac_flusher = LacFlusher(ctx, md.ledger_id, self._key, self._owner.post, self._lac_snapshot)
        self._timer = ctx.scheduler.call_later(self._sweep_interval(), self._check_timeouts)

    # --- public API -------------------------------------------------------------
    @property
    def ledger_id(self) -> int:
        return self._ledger_id

    @property
    def max_inflight_adds(self) -> int:
        """How many adds may be unconfirmed at once (``ClientConfig.max_inflight_adds``): ``append_async`` blocks
        past it."""
        return self._max_inflight

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
        return self._owner.call(lambda: self._tracker.degraded_bookies)

    def append(self, data: bytes) -> int:
        """Add one entry; returns its id once Qa bookies stored it and every earlier entry is confirmed."""
        return self.append_async(data).result()

    def append_async(self, data: bytes) -> "Future[int]":
        """Queue one entry; the future resolves to its entry id (or fails, e.g. LedgerFencedError).

        Blocks while ``max_inflight_adds`` adds are unconfirmed. Done-callbacks run on the
        client's network thread: keep them short and never wait for this writer in them.
        """
        payload = check_payload(data, self._max_payload)
        future = new_future()
        while True:
            with self._submit:
                if self._failure is not None or self._closing:
                    self._check_open()
                if self._admitted - self._released < self._max_inflight:
                    entry_id = self._next_id
                    if entry_id > entry_format.MAX_ENTRY_ID:
                        raise LedgerFullError(f"ledger {self._ledger_id} reached the largest entry id "
                                              f"({entry_format.MAX_ENTRY_ID}): close it and write to a new ledger")
                    # encoded here, in id order: the owner's tracker assigns the same id and length (checked)
                    length = self._next_length + len(payload)
                    lac = self._lac_hint  # a confirmed entry (it only grows): the header's hint
                    frame = self._encoder.encode_pieces(
                        entry_id, self._codec.encode_head(self._ledger_id, entry_id, lac, length, payload), payload)
                    self._next_id, self._next_length = entry_id + 1, length
                    self._admitted += 1
                    wake = not self._inbox
                    self._inbox.append((entry_id, len(payload), lac, frame, future))
                    break
            self._wait_for(self._has_room)
        if wake:
            self._owner.post(self._take_inbox)
        return future

    def close(self) -> None:
        """Wait (up to ``close_timeout_s``) for adds in flight, then CLOSE the ledger at its LAC.

        Adds still unconfirmed then fail with LedgerClosedError. Idempotent: a second
        call returns, or raises the first call's error again. LedgerFencedError if
        another client recovered (or is recovering) the ledger at another end.
        """
        with self._submit:
            first = not self._closing
            self._closing = True
        self._wake_waiters()
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
            self._release_loop()
            if self._on_close is not None:
                self._on_close(self)

    def abort(self, reason: str = "the client was closed") -> None:
        """Stop without closing the ledger: pending adds fail with LedgerClosedError (client shutdown)."""
        with self._submit:
            self._closing = True
        self._wake_waiters()
        error = LedgerClosedError(f"ledger {self.ledger_id}: {reason}")
        self._owner.call(lambda: (self._fail_writer(error), self._take_inbox()))
        self._timer.cancel()
        self._lac_flusher.cancel()
        self._close_done.set()
        self._release_loop()

    def __enter__(self) -> "LedgerWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_leaving_block(self.close, exc_type is not None, log, f"ledger {self.ledger_id}")

    # --- close --------------------------------------------------------------------
    def _close(self) -> None:
        self._wait_for(lambda: self._admitted == self._released or self._failure is not None,
                       self._ctx.config.close_timeout_s)
        self._owner.call(lambda: (self._take_inbox(), self._stop(LedgerClosedError(
            f"ledger {self.ledger_id} was closed before this add was confirmed"))))
        self._timer.cancel()
        self._lac_flusher.cancel()
        with self._metadata_lock:  # waits for an ensemble change in flight (it sets _current under this lock)
            current, lac, length = self._current, self._tracker.last_add_confirmed, self._tracker.length  # stopped
            self._current = close_ledger(self._ctx.store, current, lac, length, retry_policy(self._ctx.config))
        log.debug("ledger %d closed at entry %d", self.ledger_id, lac)

    def _release_loop(self) -> None:
        if self._own_loop:
            self._own_loop = False
            release_io_loop(self._owner.loop)

    # --- callers waiting for room (close waits for the adds in flight the same way) --------
    def _has_room(self) -> bool:
        return self._admitted - self._released < self._max_inflight or self._failure is not None or self._closing

    def _wait_for(self, predicate, timeout: float | None = None) -> bool:
        with self._room:
            self._room_waiters += 1  # before the predicate: the owner notifies once it sees a waiter
            try:
                return self._room.wait_for(predicate, timeout)
            finally:
                self._room_waiters -= 1

    def _wake_waiters(self) -> None:
        with self._room:
            self._room.notify_all()

    # --- the owner: new adds ------------------------------------------------------------
    def _take_inbox(self) -> None:
        """Entries callers queued (a bounded chunk: the rest is taken in the next turn of the loop, after the
        streams wrote this one): tracked, and sent with one ``send_adds`` per bookie."""
        with self._submit:
            items = self._inbox
            if len(items) > _CHUNK_ADDS:
                items, self._inbox = items[:_CHUNK_ADDS], items[_CHUNK_ADDS:]
            else:
                self._inbox = []
            more = bool(self._inbox)
        if more:
            try:
                self._owner.loop.call_soon(lambda: self._owner.post(self._take_inbox))
            except BookieUnavailableError:  # no loop any more: no turn to wait for
                self._owner.post(self._take_inbox)
        if not items:
            return
        if self._tracker.stopped:
            error = self._failure or LedgerClosedError(f"ledger {self.ledger_id} is closed: it takes no more adds")
            self._released += len(items)
            for item in items:
                self._done.push(item[4], error=error)
            return
        first, write_sets = self._tracker.add_many(list(map(_SIZE, items)))
        if first != items[0][0] or items[-1][0] - first != len(items) - 1:
            raise InternalError(f"ledger {self._ledger_id}: entries {items[0][0]}..{items[-1][0]} were encoded as "
                                f"entries {first}..{first + len(write_sets) - 1} of the tracker")
        entry_ids, now = range(first, first + len(items)), time.monotonic()
        adds = list(zip(entry_ids, map(_FRAME, items)))  # (entry id, encoded add), in order
        self._frames.update(adds)
        self._futures.update(zip(entry_ids, map(_FUTURE, items)))
        self._lac_flusher.entry_sent(items[-1][2], now)
        if len({frozenset(targets) for targets in set(write_sets)}) == 1:
            # every entry goes to the same bookies (E = Qw: write sets differ only in order): one list for all
            for bookie in write_sets[0]:
                self._outstanding.sent_many(bookie, entry_ids, now)
                self._transmit(bookie, adds)
            return
        per_bookie: dict[str, list[tuple[int, bytes]]] = {}  # striping (E > Qw): each bookie its own, in order
        for add, targets in zip(adds, write_sets):
            for bookie in targets:
                per_bookie.setdefault(bookie, []).append(add)
        for bookie, queued in per_bookie.items():
            self._send(bookie, queued, now)

    def _transmit(self, bookie: str, adds: list[tuple[int, bytes]]) -> None:
        """Hand adds to the transport; a bookie refusing them at once fails after this event (a bookie failure)."""
        try:
            self._ctx.transport.send_adds(bookie, self._ledger_id, adds, self._answers)
        except LedgerError as exc:
            self._owner.post(self._on_bookie_error, adds[0][0], bookie, str(exc))

    def _send(self, bookie: str, adds, now: float) -> None:
        """Send ``(entry id, encoded add)`` pairs to one bookie (striped new adds, re-sends after a change)."""
        adds = list(adds)
        self._outstanding.sent_many(bookie, [entry_id for entry_id, _ in adds], now)
        self._transmit(bookie, adds)

    def _confirm(self, confirmed) -> None:
        """The entries of ``confirmed`` (ids, in order) are confirmed: their futures complete, in order."""
        if not confirmed:  # most answers confirm nothing (a paced add's first and third)
            return
        frames, futures = self._frames, self._futures
        for entry_id in confirmed:
            frames.pop(entry_id, None)
        done_futures = [futures.pop(entry_id, None) for entry_id in confirmed]
        done_ids = list(confirmed)
        if None in done_futures:  # a future already failed or handed out elsewhere: only the others complete
            done_ids = [entry_id for entry_id, future in zip(done_ids, done_futures) if future is not None]
            done_futures = [future for future in done_futures if future is not None]
        if done_futures:
            self._released += len(done_futures)
            self._done.push_results(done_futures, done_ids)
        self._lac_hint = lac = self._tracker.last_add_confirmed
        self._lac_flusher.lac_moved(lac)

    def _stop(self, error: LedgerError) -> None:
        for entry_id in self._tracker.stop(str(error)):
            self._frames.pop(entry_id, None)
            future = self._futures.pop(entry_id, None)
            if future is not None:
                self._released += 1
                self._done.push(future, error=error)

    def _fail_writer(self, error: LedgerError) -> None:
        if self._failure is None:
            self._failure = error
            log.info("ledger %d: writer stopped: %s", self.ledger_id, error)
        self._stop(error)

    # --- completions ----------------------------------------------------------------------
    def _complete_futures(self) -> None:
        """After each run of events: wake callers waiting for room, then complete futures in entry order."""
        if self._room_waiters:
            self._wake_waiters()
        if self._done:
            self._done.run()

    # --- checks ---------------------------------------------------------------------------
    def _lac_snapshot(self) -> tuple[int, tuple[str, ...]] | None:
        """For the explicit LAC (lock held): the LAC and the current ensemble, while adds are taken."""
        if self._tracker.stopped or self._closing:
            return None
        return self._tracker.last_add_confirmed, self._tracker.ensemble

    def _check_open(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(f"ledger {self.ledger_id} takes no more adds: {self._failure}")
        if self._closing:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed (or closing): it takes no more adds")
