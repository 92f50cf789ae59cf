"""A writer's bookie failures and ensemble changes, with the back-off between the changes of a streak.

Part of ``LedgerWriter`` (``writer.py``), as a base class: every method here
runs on the writer's owner thread (``add_bookkeeping.WriterOwner``) except
``_change``, which runs on the client's worker pool under ``_metadata_lock``
and posts its outcome back as an event.

A bookie failure (an error status, a broken stream, a bookie that refused an
add at once, a silent bookie) is reported to the client's quarantine, which
placement avoids while other bookies are left, and to the tracker, which
decides whether an ensemble change is needed (``AddTracker.failed``; with
``delay_ensemble_change`` the bookie may stay, *degraded*, while Qa stays
reachable; logged at INFO once per bookie). Flapping bookies (issue 12, part
9): the changes of a streak are spaced by ``protocol.quarantine.change_delay``
(``ClientConfig.ensemble_change_backoff``). A bookie that fails while the last
change is too recent is reported to the tracker only when the back-off has
passed: until then it counts as a silent bookie does before ``add_timeout_s``,
so entries whose write set still has Qa other bookies are confirmed without it
(no change is in progress, so docs/protocol.md W2 does not hold them).
Failures that join a change in progress start the next change after the
back-off. ``ensemble_changes`` counts the changes this writer made.
"""
from __future__ import annotations

import logging
import time

from pyspark_ledger.client.ensemble_change import change_ensemble
from pyspark_ledger.errors import LedgerClosedError, LedgerError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.protocol.add_tracker import EnsembleChangeRequest
from pyspark_ledger.protocol.quarantine import change_delay, streak_after_change

log = logging.getLogger("pyspark_ledger.client.writer")  # one logger for the writer's INFO lines


class EnsembleChanges:
    """The failure and ensemble-change half of ``LedgerWriter`` (see the module docstring)."""

    ensemble_changes = 0

    def _on_bookie_error(self, entry_id: int, bookie: str, reason: str, replace_now: bool = False) -> None:
        if self._failure is not None or bookie in self._failed_bookies:
            return
        log.info("ledger %d: add of entry %d to bookie %s failed: %s", self._ledger_id, entry_id, bookie, reason)
        self._failed_bookies.add(bookie)
        self._ctx.quarantine.failed(bookie, reason)
        self._outstanding.forget(bookie)
        wait = self._change_wait()
        if wait > 0:  # a streak of changes: the tracker hears of it after the back-off (module docstring)
            log.info("ledger %d: bookie %s is replaced after a %.2f s back-off (change %d of a streak)",
                     self._ledger_id, bookie, wait, self._change_streak + 1)
            self._ctx.scheduler.call_later(wait, lambda: self._owner.post(self._report_failure, bookie,
                                                                          replace_now))
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
                     "acked are confirmed without it, under-replicated (%d copies, not %d)", self._ledger_id, bookie,
                     quorums.ack_quorum, quorums.write_quorum)

    def _start_change(self, request: EnsembleChangeRequest) -> None:
        exclude = set(self._failed_bookies)
        delay = self._change_wait()
        if delay > 0:  # failures that joined a change in progress: its confirmations wait (W2)
            log.info("ledger %d: ensemble change waits %.2f s (change %d of a streak of failures)", self._ledger_id,
                     delay, self._change_streak + 1)
            self._ctx.scheduler.call_later(delay, lambda: self._owner.post(self._run_change, request, exclude))
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
        """On the worker pool: write the new fragment, then hand the outcome to the owner."""
        with self._metadata_lock:
            if self._tracker.stopped:
                return
            try:
                changed = change_ensemble(self._ctx, self._current, request, exclude)
            except LedgerError as exc:
                return self._owner.post(self._fail_writer, exc)
            except Exception as exc:  # noqa: BLE001 - surfaced to every pending add, never lost
                error = LedgerClosedError(f"ensemble change of ledger {self._ledger_id} failed: {exc!r}")
                return self._owner.post(self._fail_writer, error)
            self._current = changed  # under the metadata lock, for close (the event updates the rest)
            self._owner.post(self._changed, changed)

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
        self._confirm([add.entry_id for add in outcome.confirmed])
        if outcome.next_change is not None:
            self._start_change(outcome.next_change)
        else:  # failures that joined this change and may wait (delay_ensemble_change)
            self._log_degraded(self._tracker.degraded_bookies)
