"""The free and total disk space of a bookie's journal and ledger dirs, kept current in its registration.

``measure_space`` reads both file systems (``shutil.disk_usage``: free is what
the bookie's user may still write). ``SpaceReport`` publishes the measure with
the registration at start, then every ``REPORT_INTERVAL_S`` updates the
registration when a figure moved by at least ``MIN_CHANGE_BYTES`` since the
last update: at most one metadata write per bookie every 10 s, none while
nothing moves. A failed update (the metadata store is down) is logged and
tried again next round. ``ledger bookies`` reads the figures back
(``pyspark_ledger.metadata.bookie_space``).
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from bookie_server.periodic import PeriodicThread
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.metadata.bookie_space import INFO_KEY, Space, space_info

log = logging.getLogger(__name__)
REPORT_INTERVAL_S = 10.0
MIN_CHANGE_BYTES = 1024 * 1024


def measure_space(journal_dir: Path, ledger_dir: Path) -> dict[str, Space]:
    """``{"journal": Space, "ledgers": Space}`` of the file systems holding the two directories."""
    spaces = {}
    for area, directory in (("journal", journal_dir), ("ledgers", ledger_dir)):
        usage = shutil.disk_usage(directory)
        spaces[area] = Space(usage.free, usage.total)
    return spaces


def moved(before: Mapping[str, Space], now: Mapping[str, Space]) -> bool:
    """Whether any figure differs by ``MIN_CHANGE_BYTES`` or more (or an area appeared or went)."""
    if before.keys() != now.keys():
        return True
    return any(abs(a - b) >= MIN_CHANGE_BYTES for area in now for a, b in zip(before[area], now[area]))


class SpaceReport:
    """Publishes ``measure()`` inside the registration info; ``start()``/``stop()`` the periodic refresh."""

    def __init__(self, measure: Callable[[], dict[str, Space]], interval_s: float = REPORT_INTERVAL_S) -> None:
        self._measure = measure
        self._published: dict[str, Space] | None = None
        self._base: dict[str, Any] = {}
        self._registration = None
        self._thread = PeriodicThread("bookie-space-report", interval_s, self.refresh, "disk space report")

    def info(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """``base`` with the space as of now, for the first registration."""
        self._base = dict(base)
        self._published = self._read()
        return self._with_space(self._published)

    def start(self, registration) -> None:
        """Keep ``registration`` (registered with ``info()``) current from now on."""
        self._registration = registration
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def refresh(self) -> None:
        """One round: measure, and update the registration if the space moved."""
        now = self._read()
        if self._registration is None or not now or (self._published is not None and not moved(self._published, now)):
            return
        try:
            self._registration.update_info(self._with_space(now))
        except LedgerError as exc:
            log.warning("could not publish the disk space in the registration (retried in %g s): %s",
                        REPORT_INTERVAL_S, exc)
            return
        self._published = now

    def _read(self) -> dict[str, Space]:
        try:
            return self._measure()
        except OSError as exc:
            log.error("cannot read the disk space of the journal and ledger dirs: %s", exc)
            return {}

    def _with_space(self, spaces: Mapping[str, Space]) -> dict[str, Any]:
        return {**self._base, INFO_KEY: space_info(spaces)} if spaces else dict(self._base)
