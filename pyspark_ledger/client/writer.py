"""The writer's handle of one ledger: pipelined appends, ensemble changes and close.

Every decision is the protocol core's (``AddTracker`` for write sets,
confirmation order, the LAC and the entries to re-send; ``ledger_rules``
through ``ensemble_change`` / ``metadata_ops`` for metadata). This module
encodes entries, sends them over the transport, feeds the answers back and
completes the callers' futures, in entry order.

Threads: answers arrive on transport threads, add timeouts on the client's
scheduler, ensemble changes run on the client's worker pool. All of them
take ``_lock`` (re-entrant, since a future may complete inside ``add()``)
and post events to ``_inbox``, drained by whoever holds the lock, so a
callback never re-enters the tracker half-way. User futures are completed
after the lock is released, by one thread at a time, in order.
An answer FENCED or UNAUTHORIZED is fatal for the writer; any other error
status, a broken stream or a silent bookie (``add_timeout_s``) is a bookie
failure and leads to an ensemble change.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future

from pyspark_ledger.client.add_bookkeeping import OrderedCompletions, Outstanding
from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.ensemble_change import change_ensemble
from pyspark_ledger.client.metadata_ops import close_ledger
from pyspark_ledger.client.rpc_errors import BookieStatus
from pyspark_ledger.entry import HEADER_SIZE, EntryCodec, master_key
from pyspark_ledger.errors import (BookieError, InvalidConfigurationError, LedgerClosedError, LedgerError,
                                   LedgerFencedError, UnauthorizedError)
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.protocol.add_tracker import AddTracker, ConfirmedAdd, EnsembleChangeRequest

log = logging.getLogger(__name__)
_DIGEST_ROOM = 32


class LedgerWriter:
    """Appends to one OPEN ledger (``LedgerClient.create_ledger`` makes one); a context manager."""

    def __init__(self, ctx: ClientContext, created: Versioned[LedgerMetadata], password: bytes,
                 on_close=None) -> None:
        md = created.value
        self._ctx = ctx
        self._current = created
        self._codec = EntryCodec(md.digest_type, password)
        self._key = master_key(password)
        self._max_payload = ctx.config.max_entry_bytes - HEADER_SIZE - _DIGEST_ROOM
        self._tracker = AddTracker(md.current_fragment.bookies, md.write_quorum, md.ack_quorum)
        self._lock = threading.RLock()
        self._room = threading.Condition(self._lock)
        self._inbox: deque = deque()
        self._busy = False
        self._bodies: dict[int, bytes] = {}
        self._futures: dict[int, Future] = {}
        self._outstanding = Outstanding()
        self._failed_bookies: set[str] = set()
        self._failure: LedgerError | None = None
        self._closing = False
        self._close_done = threading.Event()
        self._close_error: LedgerError | None = None
        self._done = OrderedCompletions()
        self._metadata_lock = threading.Lock()
        self._on_close = on_close
        self._timer = ctx.scheduler.call_later(self._sweep_interval(), self._check_timeouts)

    # --- public API -------------------------------------------------------------
    @property
    def ledger_id(self) -> int:
        return self._current.value.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._tracker.last_add_confirmed

    @property
    def length(self) -> int:
        return self._tracker.length

    @property
    def metadata(self) -> LedgerMetadata:
        return self._current.value

    def append(self, data: bytes) -> int:
        """Add one entry; returns its id once Qa bookies stored it and every earlier entry is confirmed."""
        return self.append_async(data).result()

    def append_async(self, data: bytes) -> "Future[int]":
        """Queue one entry; the future resolves to its entry id (or fails, e.g. LedgerFencedError).

        Blocks while ``max_inflight_adds`` adds are unconfirmed. Done-callbacks run on
        client threads: keep them short and never wait for this writer in them.
        """
        payload = self._check_payload(data)
        with self._lock:
            self._room.wait_for(self._has_room)
            self._check_open()
            future: Future = Future()
            plan = self._tracker.add(len(payload))
            body = self._codec.encode(self.ledger_id, plan.entry_id, plan.last_add_confirmed, plan.length, payload)
            self._bodies[plan.entry_id] = body
            self._futures[plan.entry_id] = future
            now = time.monotonic()
            self._under_lock(lambda: [self._send(plan.entry_id, bookie, body, now) for bookie in plan.targets])
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
            self._under_lock(lambda: self._fail_writer(LedgerClosedError(f"ledger {self.ledger_id}: {reason}")))
        self._timer.cancel()
        self._complete_futures()
        self._close_done.set()

    def __enter__(self) -> "LedgerWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except LedgerError:
            log.warning("closing ledger %d after an error failed", self.ledger_id, exc_info=True)

    # --- close --------------------------------------------------------------------
    def _close(self) -> None:
        deadline = time.monotonic() + self._ctx.config.close_timeout_s
        with self._lock:
            self._room.wait_for(lambda: not self._futures or self._failure is not None,
                                max(0.0, deadline - time.monotonic()))
            self._under_lock(lambda: self._stop(LedgerClosedError(
                f"ledger {self.ledger_id} was closed before this add was confirmed")))
        self._timer.cancel()
        self._complete_futures()
        with self._metadata_lock:  # waits for an ensemble change in flight
            with self._lock:
                current, lac, length = self._current, self._tracker.last_add_confirmed, self._tracker.length
            self._current = close_ledger(self._ctx.store, current, lac, length, self._ctx.config.metadata_retries)
        log.debug("ledger %d closed at entry %d", self.ledger_id, lac)

    # --- sending and answers (lock held) --------------------------------------------
    def _send(self, entry_id: int, bookie: str, body: bytes, now: float | None = None) -> None:
        self._outstanding.sent(bookie, entry_id, now)
        try:
            future = self._ctx.transport.add(bookie, self.ledger_id, entry_id, self._key, body)
        except LedgerError as exc:
            self._inbox.append(lambda: self._on_bookie_error(entry_id, bookie, str(exc)))
            return
        future.add_done_callback(lambda done: self._on_add_done(entry_id, bookie, done))

    def _on_add_done(self, entry_id: int, bookie: str, done: Future) -> None:
        """An add's answer arrived (transport thread); the hot path of ``_post``."""
        with self._lock:
            if self._busy:
                self._inbox.append(lambda: self._on_answer(entry_id, bookie, done))
                return
            self._busy = True
            try:
                self._on_answer(entry_id, bookie, done)
                while self._inbox:
                    self._inbox.popleft()()
            finally:
                self._busy = False
        if self._done:
            self._complete_futures()

    def _on_answer(self, entry_id: int, bookie: str, done: Future) -> None:
        self._outstanding.answered(bookie, entry_id)
        try:
            result = done.result()
        except BaseException as error:  # noqa: BLE001 - any failure of the call is a bookie failure
            reason = str(error) if isinstance(error, BookieError) else repr(error)
            return self._on_bookie_error(entry_id, bookie, reason)
        if result.ok:
            return self._confirm(self._tracker.ack(entry_id, bookie))
        if result.status == BookieStatus.FENCED:
            return self._fail_writer(LedgerFencedError(
                f"ledger {self.ledger_id} was fenced by another client (bookie {bookie}, entry {entry_id}); "
                "adds not yet confirmed may or may not be in the ledger"))
        if result.status == BookieStatus.UNAUTHORIZED:
            return self._fail_writer(UnauthorizedError(
                f"bookie {bookie} refused entry {entry_id} of ledger {self.ledger_id}: it holds another master "
                f"key for this ledger id ({result.message})"))
        self._on_bookie_error(entry_id, bookie, f"{result.status.name}: {result.message}")

    def _on_bookie_error(self, entry_id: int, bookie: str, reason: str) -> None:
        if self._failure is not None or bookie in self._failed_bookies:
            return
        log.info("ledger %d: add of entry %d to bookie %s failed: %s", self.ledger_id, entry_id, bookie, reason)
        self._failed_bookies.add(bookie)
        self._outstanding.forget(bookie)
        request = self._tracker.failed(bookie)
        if request is not None:
            self._start_change(request)

    def _confirm(self, confirmed: tuple[ConfirmedAdd, ...]) -> None:
        for add in confirmed:
            self._bodies.pop(add.entry_id, None)
            future = self._futures.pop(add.entry_id, None)
            if future is not None:
                self._done.push(future, add.entry_id)
        if confirmed:
            self._room.notify_all()

    def _stop(self, error: LedgerError) -> None:
        for entry_id in self._tracker.stop(str(error)):
            self._bodies.pop(entry_id, None)
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
                return self._post(lambda: self._fail_writer(exc))
            except Exception as exc:  # noqa: BLE001 - surfaced to every pending add, never lost
                error = LedgerClosedError(f"ensemble change of ledger {self.ledger_id} failed: {exc!r}")
                return self._post(lambda: self._fail_writer(error))
            self._post(lambda: self._changed(changed))

    def _changed(self, changed: Versioned[LedgerMetadata]) -> None:
        self._current = changed
        if self._tracker.stopped:
            return
        outcome = self._tracker.ensemble_changed(changed.value.current_fragment.bookies)
        for resend in outcome.resends:
            for bookie in resend.targets:
                self._send(resend.entry_id, bookie, self._bodies[resend.entry_id])
        self._confirm(outcome.confirmed)
        if outcome.next_change is not None:
            self._start_change(outcome.next_change)

    # --- add timeouts -----------------------------------------------------------------
    def _sweep_interval(self) -> float:
        return max(0.01, self._ctx.config.add_timeout_s / 4)

    def _check_timeouts(self) -> None:
        limit = time.monotonic() - self._ctx.config.add_timeout_s
        self._post(lambda: self._time_out_before(limit))
        with self._lock:
            if not self._tracker.stopped:  # also while close() waits for adds in flight
                self._timer = self._ctx.scheduler.call_later(self._sweep_interval(), self._check_timeouts)

    def _time_out_before(self, limit: float) -> None:
        for bookie, entry_id in self._outstanding.silent_since(limit):
            self._on_bookie_error(entry_id, bookie, f"no answer within {self._ctx.config.add_timeout_s} s")

    # --- event plumbing -------------------------------------------------------------------
    def _post(self, event) -> None:
        """Run ``event`` under the lock, after any event being handled up the stack."""
        with self._lock:
            self._inbox.append(event)
            if not self._busy:
                self._drain_inbox()
        self._complete_futures()

    def _under_lock(self, action) -> None:
        """Run ``action`` (lock held) so that events it triggers wait until it is done."""
        busy, self._busy = self._busy, True
        try:
            action()
        finally:
            self._busy = busy
        if not busy:
            self._drain_inbox()

    def _drain_inbox(self) -> None:
        self._busy = True
        try:
            while self._inbox:
                self._inbox.popleft()()
        finally:
            self._busy = False

    def _complete_futures(self) -> None:
        """Complete finished user futures in entry order, outside the lock."""
        self._done.run()

    # --- checks ---------------------------------------------------------------------------
    def _has_room(self) -> bool:
        return (len(self._futures) < self._ctx.config.max_inflight_adds or self._failure is not None
                or self._closing)

    def _check_open(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(f"ledger {self.ledger_id} takes no more adds: {self._failure}")
        if self._closing:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed (or closing): it takes no more adds")

    def _check_payload(self, data) -> bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidConfigurationError(
                f"an entry must be bytes-like, got {type(data).__name__}: encode text first (e.g. s.encode())")
        payload = bytes(data)
        if len(payload) > self._max_payload:
            raise InvalidConfigurationError(
                f"entry of {len(payload)} bytes exceeds the largest entry of {self._max_payload} bytes "
                "(ClientConfig.max_entry_bytes, which must stay within the bookies' --max-entry-size): split it")
        return payload
