"""Automatic re-replication: notice bookies that stay gone and rebuild the copies they held.

``AutoRecovery(client, password, delay_s=60).run(stop)`` checks every
``interval_s``: it reads every ledger's metadata, asks ``AbsenceClock`` which
of the bookies the fragments name have been unregistered for ``delay_s``
(a bookie restarting within the delay is left alone), and re-replicates each
ledger that keeps a sealed fragment on one of them (``rereplicate_ledger``).
A ledger it cannot repair now (no spare bookie, a replica unreachable, a
concurrent change) is tried again next round; one written with another
password is reported once per round and skipped. Any number of AutoRecovery
processes may run: the metadata CAS lets one win per ledger and the others
find nothing left to do.

Each round reads all ledger metadata: fine for thousands of ledgers, not for
millions (BookKeeper keeps an under-replicated-ledger index for that).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark_ledger.errors import InvalidConfigurationError, LedgerError, NoSuchLedgerError, UnauthorizedError
from pyspark_ledger.protocol.rereplication import AbsenceClock, plan_repairs

log = logging.getLogger(__name__)


@dataclass
class RoundReport:
    """What one round saw and did."""

    lost_bookies: list[str] = field(default_factory=list)
    repaired: list[dict] = field(default_factory=list)     # RereplicationReport.as_dict() per ledger
    failed: list[dict] = field(default_factory=list)       # {"ledger_id", "error"}

    def as_dict(self) -> dict:
        return {"lost_bookies": self.lost_bookies, "repaired": self.repaired, "failed": self.failed}


class AutoRecovery:
    """The re-replication loop of one process (see the module docstring)."""

    def __init__(self, client, password: bytes, *, delay_s: float = 60.0, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_round: Callable[[RoundReport], None] | None = None) -> None:
        for name, value in (("delay_s", delay_s), ("interval_s", interval_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
        if interval_s == 0:
            raise InvalidConfigurationError("interval_s must be > 0 (seconds between rounds)")
        self._client = client
        self._password = password
        self._interval_s = float(interval_s)
        self._clock = clock
        self._absence = AbsenceClock(float(delay_s))
        self._on_round = on_round

    def run_once(self) -> RoundReport:
        """One round: find the lost bookies, re-replicate what they held of sealed fragments."""
        ledgers = self._ledgers()
        named = {bookie for md in ledgers for fragment in md.fragments for bookie in fragment.bookies}
        lost = self._absence.observe(named, self._client.bookies(), self._clock())
        report = RoundReport(sorted(lost))
        for md in ledgers:
            held = sorted({b for fragment in md.fragments for b in fragment.bookies} & lost)
            if not held or not plan_repairs(md, held).repairs:
                continue
            try:
                done = self._client.rereplicate(md.ledger_id, self._password, held)
            except NoSuchLedgerError:
                continue  # deleted meanwhile
            except UnauthorizedError:
                report.failed.append({"ledger_id": md.ledger_id, "error": "written with another password: skipped"})
                continue
            except LedgerError as exc:
                log.warning("re-replication of ledger %d failed, tried again next round: %s", md.ledger_id, exc)
                report.failed.append({"ledger_id": md.ledger_id, "error": str(exc)})
                continue
            if done.replaced:
                report.repaired.append(done.as_dict())
        if self._on_round is not None:
            self._on_round(report)
        return report

    def run(self, stop: threading.Event) -> None:
        """Rounds every ``interval_s`` until ``stop`` is set; a round's unexpected error is logged, not fatal."""
        while not stop.is_set():
            try:
                self.run_once()
            except LedgerError as exc:  # e.g. the metadata store is unreachable for a while
                log.warning("auto-recovery round failed, trying again: %s", exc)
            stop.wait(self._interval_s)

    def _ledgers(self) -> list:
        found = []
        for ledger_id in self._client.list_ledgers():
            try:
                found.append(self._client.ledger_metadata(ledger_id))
            except NoSuchLedgerError:
                continue
        return found
