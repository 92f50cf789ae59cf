"""Automatic re-replication: notice bookies that stay gone and rebuild the copies they held.

``AutoRecovery(client, passwords, delay_s=60).run(stop)`` checks every
``interval_s``: it reads every ledger's metadata, asks ``AbsenceClock`` which
of the bookies the fragments name have been unregistered for ``delay_s``
(a bookie restarting within the delay is left alone), and re-replicates each
ledger that keeps a sealed fragment on one of them (``rereplicate_ledger``).
A ledger it cannot repair now (no spare bookie, a replica unreachable, a
concurrent change) is tried again next round. Each ledger is opened with
its own password: its secret sealed to the cluster's repair key when the
client holds it (``ClientConfig.repair_key_file``), else the first of
``passwords`` that matches; a ledger nothing opens is reported each round
(by id, with what is missing) and skipped, and the others are repaired. Any number of AutoRecovery
processes may run: the metadata CAS lets one win per ledger and the others
find nothing left to do. ``on_round(report)`` hears every round's
``RoundReport``; ``on_progress(ledger_id, copied, total)`` hears the copying
of each ledger as it goes (``LedgerClient.rereplicate``).

A ledger left OPEN by a writer that died keeps its last fragment unsealed,
and re-replication leaves an unsealed fragment to its writer. When that
fragment names a lost bookie for ``open_grace_s`` (default 30 s, as
BookKeeper's open-ledger re-replication grace period; None: never), the
round recovers the ledger -- fences and closes it, exactly as
``open_ledger(recovery=True)`` does -- and then repairs it like any closed
one. A writer still alive but idle for that long is fenced too: its next add
fails with LedgerFencedError (a live writer that adds replaces the lost
bookie itself long before).

A round reads every ledger's metadata only when something may need repair
(``rereplication.should_scan``): on the first round, while a bookie is absent
or a repair is pending, when a bookie has left since the last scan, and every
``full_scan_every`` rounds. A healthy cluster costs one read of the bookie
registrations per round. A scan reads all ledger metadata: fine for
thousands of ledgers, not for millions (BookKeeper keeps an
under-replicated-ledger index for that).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from pyspark_ledger.errors import InvalidConfigurationError, LedgerError, NoSuchLedgerError, UnauthorizedError
from pyspark_ledger.protocol.rereplication import AbsenceClock, Lasting, open_on_lost, plan_repairs, should_scan

log = logging.getLogger(__name__)


@dataclass
class RoundReport:
    """What one round saw and did."""

    lost_bookies: list[str] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)     # open ledgers fenced and closed (writer gone)
    repaired: list[dict] = field(default_factory=list)     # RereplicationReport.as_dict() per ledger
    failed: list[dict] = field(default_factory=list)       # {"ledger_id", "error"}
    scanned: bool = True                                    # False: the round read no ledger metadata

    def as_dict(self) -> dict:
        return {"lost_bookies": self.lost_bookies, "recovered": self.recovered, "repaired": self.repaired,
                "failed": self.failed}


class AutoRecovery:
    """The re-replication loop of one process (see the module docstring)."""

    def __init__(self, client, passwords: bytes | Sequence[bytes] = (), *, delay_s: float = 60.0,
                 interval_s: float = 10.0,
                 open_grace_s: float | None = 30.0, full_scan_every: int = 30,
                 clock: Callable[[], float] = time.monotonic,
                 on_round: Callable[[RoundReport], None] | None = None,
                 on_progress: Callable[[int, int, int], None] | None = None) -> None:
        settings = [("delay_s", delay_s), ("interval_s", interval_s)]
        if open_grace_s is not None:
            settings.append(("open_grace_s", open_grace_s))
        for name, value in settings:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
        if interval_s == 0:
            raise InvalidConfigurationError("interval_s must be > 0 (seconds between rounds)")
        if isinstance(full_scan_every, bool) or not isinstance(full_scan_every, int) or full_scan_every < 1:
            raise InvalidConfigurationError(f"full_scan_every must be a number of rounds >= 1, got "
                                            f"{full_scan_every!r}")
        self._client = client
        if isinstance(passwords, (bytes, bytearray)):
            passwords = [passwords]
        if not all(isinstance(p, (bytes, bytearray)) for p in passwords):
            raise InvalidConfigurationError(f"passwords must be bytes or a list of bytes, got {passwords!r}")
        self._passwords = [bytes(p) for p in passwords]
        self._interval_s = float(interval_s)
        self._clock = clock
        self._absence = AbsenceClock(float(delay_s))
        self._stuck_open = None if open_grace_s is None else Lasting(float(open_grace_s))
        self._on_round = on_round
        self._on_progress = on_progress
        self._full_scan_every = full_scan_every
        self._scanned_with: frozenset[str] | None = None  # the registered bookies at the last scan
        self._pending = False
        self._rounds_since_scan = 0

    def run_once(self) -> RoundReport:
        """One round: find the lost bookies, recover open ledgers stuck on them past the grace period,
        re-replicate what they held of sealed fragments (or nothing, when nothing can need it)."""
        registered = frozenset(self._client.bookies())
        if not should_scan(self._scanned_with, registered, self._pending, self._rounds_since_scan,
                           self._full_scan_every):
            self._rounds_since_scan += 1
            report = RoundReport(scanned=False)
        else:
            report = self._scan(registered)
        if self._on_round is not None:
            self._on_round(report)
        return report

    def _scan(self, registered: frozenset[str]) -> RoundReport:
        ledgers = self._ledgers()
        named = {bookie for md in ledgers for fragment in md.fragments for bookie in fragment.bookies}
        now = self._clock()
        lost = self._absence.observe(named, self._client.bookies(), now)
        report = RoundReport(sorted(lost))
        due = set()
        if self._stuck_open is not None:
            due = self._stuck_open.observe({md.ledger_id for md in ledgers if open_on_lost(md, lost)}, now)
        for md in ledgers:
            if md.ledger_id in due:
                md = self._recover(md.ledger_id, report)
                if md is None:
                    continue
            held = sorted({b for fragment in md.fragments for b in fragment.bookies} & lost)
            if not held or not plan_repairs(md, held).repairs:
                continue
            try:
                done = self._client.rereplicate(md.ledger_id, None, held, passwords=self._passwords,
                                                on_progress=self._on_progress)
            except NoSuchLedgerError:
                continue  # deleted meanwhile
            except UnauthorizedError as exc:
                report.failed.append({"ledger_id": md.ledger_id, "error": f"skipped: {exc}"})
                continue
            except LedgerError as exc:
                log.warning("re-replication of ledger %d failed, tried again next round: %s", md.ledger_id, exc)
                report.failed.append({"ledger_id": md.ledger_id, "error": str(exc)})
                continue
            if done.replaced:
                report.repaired.append(done.as_dict())
        self._scanned_with, self._rounds_since_scan = registered, 0
        self._pending = bool(self._absence.absent_since or report.failed
                             or (self._stuck_open is not None and self._stuck_open.since))
        return report

    def run(self, stop: threading.Event) -> None:
        """Rounds every ``interval_s`` until ``stop`` is set; a round's unexpected error is logged, not fatal."""
        while not stop.is_set():
            try:
                self.run_once()
            except LedgerError as exc:  # e.g. the metadata store is unreachable for a while
                log.warning("auto-recovery round failed, trying again: %s", exc)
            stop.wait(self._interval_s)

    def _recover(self, ledger_id: int, report: RoundReport):
        """Fence and close an open ledger whose writer left its last fragment on a lost bookie; its
        metadata afterwards, or None (reported) when that failed."""
        log.info("ledger %d is still open with its last fragment on a lost bookie: recovering it", ledger_id)
        try:
            recovered = self._client.recover_ledger(ledger_id, passwords=self._passwords)
        except NoSuchLedgerError:
            return None
        except UnauthorizedError as exc:
            report.failed.append({"ledger_id": ledger_id, "error": f"skipped: {exc}"})
            return None
        except LedgerError as exc:
            log.warning("recovery of open ledger %d failed, tried again next round: %s", ledger_id, exc)
            report.failed.append({"ledger_id": ledger_id, "error": f"recovery failed: {exc}"})
            return None
        report.recovered.append(ledger_id)
        return recovered

    def _ledgers(self) -> list:
        found = []
        for ledger_id in self._client.list_ledgers():
            try:
                found.append(self._client.ledger_metadata(ledger_id))
            except NoSuchLedgerError:
                continue
        return found
