"""Disk-usage watch: a bookie turns read-only above a threshold and writable again below a low-water mark.

``read_only_decision`` is the rule (pure, with hysteresis so a bookie near
the threshold does not flap). ``DiskMonitor`` is the thread that applies it:
every ``interval_s`` it reads the used fraction of each directory the bookie
writes (data and journal), decides, and calls ``on_change(read_only, reason)``
when the answer changes. The owner makes storage refuse adds (READ_ONLY),
re-registers the bookie as read-only (clients pick ensembles among writable
bookies only) and, below the low-water mark, undoes both.

``create_reserve`` / ``release_reserve`` keep a reserve file in the data
dir (``--disk-reserve``): a bookie whose disk filled up before it could
checkpoint must replay its journal into the entry logs to start, which needs
space; the server releases the reserve for that, starts read-only, and makes
the reserve again once the disk is below the low-water mark.

The environment variable ``BOOKIE_DISK_USAGE_OVERRIDE`` may name a file
holding a used fraction (e.g. ``0.97``) read instead of the real usage: the
seam the tests use to fill a disk without filling it.
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from bookie_server.periodic import PeriodicThread
from pyspark_ledger.errors import InvalidConfigurationError

log = logging.getLogger(__name__)
OVERRIDE_ENV = "BOOKIE_DISK_USAGE_OVERRIDE"
DEFAULT_THRESHOLD = 0.95
DEFAULT_LOW_WATER_MARK = 0.90
DEFAULT_INTERVAL_S = 10.0
RESERVE_FILE = "RESERVED_SPACE"
DEFAULT_RESERVE_BYTES = 16 * 1024 * 1024
RESERVE_HEADROOM = 4  # make the reserve only when the disk has this many times its size free


@dataclass(frozen=True)
class DiskPolicy:
    """Read-only above ``threshold`` (fraction of the disk used), writable again below ``low_water_mark``."""

    threshold: float = DEFAULT_THRESHOLD
    low_water_mark: float = DEFAULT_LOW_WATER_MARK

    def __post_init__(self) -> None:
        for name in ("threshold", "low_water_mark"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise InvalidConfigurationError(f"disk usage {name} must be a fraction in (0, 1], got {value!r}")
        if self.low_water_mark > self.threshold:
            raise InvalidConfigurationError(
                f"disk usage low-water mark {self.low_water_mark} must not exceed the threshold {self.threshold}")


def read_only_decision(policy: DiskPolicy, read_only: bool, used_fraction: float) -> bool:
    """Whether the bookie should be read-only, given whether it is and how full its fullest disk is."""
    if read_only:
        return used_fraction >= policy.low_water_mark
    return used_fraction > policy.threshold


def used_fraction(directories: Sequence[Path]) -> float:
    """The used fraction of the fullest disk holding one of ``directories`` (or the override file's value)."""
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        return float(Path(override).read_text().strip())
    fractions = []
    for directory in directories:
        usage = shutil.disk_usage(directory)
        fractions.append((usage.total - usage.free) / usage.total if usage.total else 1.0)
    return max(fractions)


class DiskMonitor:
    """Checks disk usage every ``interval_s`` on its own thread; ``stop()`` joins it."""

    def __init__(self, policy: DiskPolicy, directories: Sequence[Path], interval_s: float,
                 on_change: Callable[[bool, str], None],
                 measure: Callable[[Sequence[Path]], float] = used_fraction) -> None:
        self._policy = policy
        self._directories = list(directories)
        self._on_change = on_change
        self._measure = measure
        self._thread = PeriodicThread("bookie-disk-monitor", interval_s, self.check, "disk usage check")
        self.read_only = False
        # True after a switch that failed: the server may have half-applied it (its reason recorded, storage
        # refusing adds, the registration not updated), so the next check reports its verdict even if it is
        # the state the monitor believes in (a disk freed before the retry must still turn the bookie writable)
        self._unsettled = False

    def start(self) -> None:
        """Start the periodic checks (call ``check()`` first for an answer before anything else starts)."""
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def check(self) -> None:
        """One check: measure, decide, and report a change."""
        try:
            used = self._measure(self._directories)
        except (OSError, ValueError) as exc:
            log.error("cannot read the disk usage of %s: %s", ", ".join(map(str, self._directories)), exc)
            return
        read_only = read_only_decision(self._policy, self.read_only, used)
        if read_only == self.read_only and not self._unsettled:
            return
        self.read_only = read_only
        if read_only:
            reason = (f"disk {used:.1%} full, over the {self._policy.threshold:.0%} threshold "
                      f"(--disk-usage-threshold); adds are refused until it is below "
                      f"{self._policy.low_water_mark:.0%}: free space or add disks")
        else:
            reason = f"disk {used:.1%} full, below the {self._policy.low_water_mark:.0%} low-water mark"
        log.warning("bookie turns %s: %s", "read-only" if read_only else "writable", reason)
        try:
            self._on_change(read_only, reason)
            self._unsettled = False
        except Exception:  # noqa: BLE001 - e.g. the metadata store is down: retried at the next check
            self.read_only = not read_only
            self._unsettled = True
            log.exception("switching the bookie to %s failed; retrying at the next check",
                          "read-only" if read_only else "writable")



def create_reserve(directory: Path, size: int) -> bool:
    """Make ``directory/RESERVED_SPACE`` hold ``size`` allocated bytes (kept if it is there); False if the disk
    has not ``RESERVE_HEADROOM`` times that free, or allocating fails (nothing is left behind then)."""
    path = Path(directory) / RESERVE_FILE
    if size <= 0:
        return False
    try:
        if path.stat().st_size >= size:
            return True
    except FileNotFoundError:
        pass
    if shutil.disk_usage(directory).free < RESERVE_HEADROOM * size:
        log.warning("not enough free space for the %d-byte disk reserve in %s (--disk-reserve)", size, directory)
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("cannot make the disk reserve %s: %s", path, exc)
        path.unlink(missing_ok=True)
        return False
    return True


def release_reserve(directory: Path) -> int:
    """Delete the reserve file; the bytes it held (0 if there was none)."""
    path = Path(directory) / RESERVE_FILE
    try:
        size = path.stat().st_blocks * 512
        path.unlink()
    except FileNotFoundError:
        return 0
    return size
