"""Explicit LAC: a writer that went quiet tells its bookies the last add confirmed, for tailing readers.

Every entry carries the writer's LAC of the moment it is sent, so a reader
learns that entry N is confirmed only from entry N+1 (docs/protocol.md L6).
BookKeeper adds an explicit LAC for the last entry of a burst; so does this
module. ``ExplicitLac`` is the rule, with the clock passed in: once
the LAC has moved past what the last entry sent (or the last explicit write)
told the bookies and no entry was sent for ``explicit_lac_interval_s``, the
LAC is due. ``LacFlusher`` runs it for one writer: ``entry_sent`` and
``lac_moved`` are called on the writer's owner thread; a check then runs on the
client's scheduler (one timer at a time, never one per entry) as a writer
event, and sends a ``WriteLac`` to every bookie of the current ensemble. The writes are advisory:
a failure only means readers wait for the next entry, so it is just logged.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Callable

from pyspark_ledger.client.context import ClientContext

log = logging.getLogger(__name__)


class ExplicitLac:
    """When to send the LAC explicitly; ``interval`` 0 turns it off."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._told = -1
        self._last_add_at = float("-inf")
        self._armed = False

    def add_sent(self, carried_lac: int, now: float) -> None:
        """An entry carrying ``carried_lac`` was sent."""
        if carried_lac > self._told:
            self._told = carried_lac
        self._last_add_at = now

    def arm(self, lac: int, now: float) -> float | None:
        """The LAC moved to ``lac``: seconds until a check is due, or None (none needed, or one is pending)."""
        if self.interval <= 0 or self._armed or lac <= self._told:
            return None
        self._armed = True
        return max(0.0, self._last_add_at + self.interval - now)

    def check(self, lac: int, now: float) -> tuple[int | None, float | None]:
        """The armed check: (LAC to send, None), (None, seconds until the next check) or (None, None)."""
        self._armed = False
        if self.interval <= 0 or lac <= self._told:
            return None, None
        due = self._last_add_at + self.interval
        if now < due:
            self._armed = True
            return None, due - now
        self._told = lac
        return lac, None


class LacFlusher:
    """Runs ``ExplicitLac`` for one writer (see the module docstring).

    ``post(event)`` runs an event on the writer's owner thread (``add_bookkeeping.WriterOwner``);
    ``snapshot()``, called in such an event, returns the writer's ``(lac, current
    ensemble)``, or None once the writer takes no more adds.
    """

    def __init__(self, ctx: ClientContext, ledger_id: int, master_key: bytes, post: Callable,
                 snapshot: Callable[[], tuple[int, tuple[str, ...]] | None]) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._key = master_key
        self._post = post
        self._snapshot = snapshot
        self._rule = ExplicitLac(ctx.config.explicit_lac_interval_s)
        self._timer = None

    def entry_sent(self, carried_lac: int, now: float) -> None:
        """An entry carrying ``carried_lac`` was sent (owner thread)."""
        self._rule.add_sent(carried_lac, now)

    def lac_moved(self, lac: int) -> None:
        """Entries were confirmed (owner thread)."""
        delay = self._rule.arm(lac, time.monotonic())
        if delay is not None:
            self._timer = self._ctx.scheduler.call_later(delay, lambda: self._post(self._check))

    def cancel(self) -> None:
        timer = self._timer
        if timer is not None:
            timer.cancel()

    def _check(self) -> None:
        """A writer event (owner thread); the writes themselves never block."""
        state = self._snapshot()
        if state is None:
            return
        lac, recheck = self._rule.check(state[0], time.monotonic())
        if recheck is not None:
            self._timer = self._ctx.scheduler.call_later(recheck, lambda: self._post(self._check))
        if lac is not None:
            self._send(lac, state[1])

    def _send(self, lac: int, ensemble: tuple[str, ...]) -> None:
        log.debug("ledger %d: explicit LAC %d to %s", self._ledger_id, lac, ", ".join(ensemble))
        for bookie in ensemble:
            try:  # one bookie refusing the call at once must not keep the LAC from the others
                future = self._ctx.transport.write_lac(bookie, self._ledger_id, self._key, lac,
                                                       timeout=self._ctx.config.read_timeout_s)
            except Exception as exc:  # noqa: BLE001 - advisory: logged, as a failed write is
                log.debug("ledger %d: explicit LAC %d to bookie %s failed: %s", self._ledger_id, lac, bookie, exc)
                continue
            future.add_done_callback(lambda done, bookie=bookie: self._written(bookie, lac, done))

    def _written(self, bookie: str, lac: int, done: Future) -> None:
        error = done.exception()
        if error is not None or not done.result().ok:
            log.debug("ledger %d: explicit LAC %d to bookie %s failed: %s", self._ledger_id, lac, bookie,
                      error or done.result())
