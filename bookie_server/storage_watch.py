"""After a storage failure: stop taking adds everywhere at once, keep serving reads, come back when safe.

When the journal, the entry log or a checkpoint fails, ``BookieStorage``
refuses adds (IO_ERROR) but keeps serving reads. Clients must learn it at
once, or they keep placing new ledgers on the bookie: ``StorageWatch`` (a
thread polling ``storage.failure`` every ``interval_s``, and poked directly
by the storage when it fails a store) tells the server, which registers the
bookie read-only and turns its health NOT_SERVING.

Coming back depends on the cause (``failure_cause`` / ``next_step``, pure):

* the disk was full (ENOSPC, EDQUOT): the failed write never reached the
  page cache, so nothing the bookie believes it wrote is missing. Once the
  fullest disk is below the low-water mark the server reopens the storage
  (close, then open again: the journal is replayed from the last checkpoint
  mark and the torn tail of the failed journal file is cut) and turns
  writable again;
* anything else (EIO from a write or an fsync, ...): after a failed fsync
  Linux may have dropped the dirty pages and marked them clean, so neither
  a reopen nor a restart can tell what the device lost, and the device
  itself may be failing. The bookie stays read-only (reads go on) and says,
  in its log, that an operator must check the disk and restart it.

``StorageHandle`` lets the server swap the storage under the servicer, the
add streams and the garbage collector: it forwards every attribute to the
current ``BookieStorage`` (one attribute lookup per call, per batch of adds).
"""
from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Callable, Sequence

from bookie_server.disk_monitor import used_fraction
from bookie_server.periodic import PeriodicThread

log = logging.getLogger(__name__)
DISK_FULL = "disk-full"
IO_FAILURE = "io-failure"
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
REOPEN, WAIT, OPERATOR = "reopen", "wait", "operator"
DEFAULT_INTERVAL_S = 0.2


class StorageHandle:
    """Forwards attribute access to ``target`` (the current BookieStorage), which the server may replace."""

    def __init__(self, target) -> None:
        object.__setattr__(self, "target", target)

    def __getattr__(self, name: str):
        return getattr(self.target, name)

    # the calls made per request: plain methods, as a __getattr__ fallback costs about a microsecond
    def add_entries(self, adds):
        return self.target.add_entries(adds)

    def add_entries_then(self, adds, on_done) -> None:
        self.target.add_entries_then(adds, on_done)

    def read_entry(self, ledger_id: int, entry_id: int, master_key: bytes | None = None) -> bytes:
        return self.target.read_entry(ledger_id, entry_id, master_key)

    def ledger(self, ledger_id: int):
        return self.target.ledger(ledger_id)

    def has_ledger(self, ledger_id: int) -> bool:
        return self.target.has_ledger(ledger_id)


def failure_cause(exc: BaseException | None) -> str:
    """DISK_FULL if an OSError with ENOSPC/EDQUOT is in the exception's cause chain, else IO_FAILURE."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return DISK_FULL
        exc = exc.__cause__ or exc.__context__
    return IO_FAILURE


def next_step(cause: str, used: float | None, low_water_mark: float) -> str:
    """What to do about a failed storage: REOPEN it, WAIT (for space), or leave it to an OPERATOR."""
    if cause != DISK_FULL:
        return OPERATOR
    if used is None or used >= low_water_mark:
        return WAIT
    return REOPEN


def advice(cause: str, low_water_mark: float) -> str:
    if cause == DISK_FULL:
        return (f"the disk is full: the bookie is read-only (reads go on) and takes adds again by itself once "
                f"the fullest disk is below {low_water_mark:.0%} (--disk-usage-lwm); free space or add disks")
    return ("the bookie is read-only (reads go on) until it is restarted: after a failed write or fsync the "
            "kernel may have dropped data the bookie wrote, and the device may be failing; check the disk "
            "(dmesg, SMART), then restart the bookie (it replays its journal)")


class StorageWatch:
    """Polls the storage's failure; reports failures and recoveries, and reopens after a full disk."""

    def __init__(self, storage: StorageHandle, directories: Sequence[Path], low_water_mark: float,
                 on_change: Callable[[str | None], None], reopen: Callable[[], None],
                 interval_s: float = DEFAULT_INTERVAL_S,
                 measure: Callable[[Sequence[Path]], float] = used_fraction) -> None:
        self._storage = storage
        self._directories = list(directories)
        self._low_water_mark = low_water_mark
        self._on_change = on_change  # reason while failed, None once writable again
        self._reopen = reopen
        self._measure = measure
        self._cause: str | None = None
        self._unreported: tuple[str | None] | None = None  # a verdict on_change failed to apply, retried
        self._thread = PeriodicThread("bookie-storage-watch", interval_s, self.check, "storage failure check")

    @property
    def failed(self) -> bool:
        return self._cause is not None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def poke(self) -> None:
        """Check now (the storage calls it when it fails; quick, takes no lock)."""
        self._thread.wake()

    def check(self) -> None:
        """One round: notice a failure, or try the way back from one."""
        if self._unreported is not None:
            self._report(self._unreported[0])
            if self._unreported is not None:
                return
        if self._cause is None:
            failure = self._storage.failure
            if failure is None:
                return
            self._cause = failure_cause(failure)
            reason = f"storage failed ({failure}); {advice(self._cause, self._low_water_mark)}"
            log.error("bookie turns read-only: %s", reason)
            self._report(reason)
        step = next_step(self._cause, self._used(), self._low_water_mark)
        if step != REOPEN:
            return
        log.warning("the fullest disk is below the %.0f%% low-water mark: reopening the storage (replaying the "
                    "journal) to take adds again", self._low_water_mark * 100)
        try:
            self._reopen()
        except Exception as exc:  # noqa: BLE001 - e.g. still no space: retried at the next round
            log.error("reopening the storage failed (%s); retrying", exc)
            return
        if self._storage.failure is None:
            self._cause = None
            log.warning("storage reopened: the bookie takes adds again")
            self._report(None)

    def mark_failed(self, cause: str, reason: str) -> None:
        """Start failed (e.g. the server had to release its disk reserve to open the storage on a full disk)."""
        self._cause = cause
        log.warning("bookie starts read-only: %s; %s", reason, advice(cause, self._low_water_mark))
        self._report(reason)

    def _report(self, reason: str | None) -> None:
        try:
            self._on_change(reason)
        except Exception:  # noqa: BLE001 - e.g. the metadata store is down: the next round tries again
            log.exception("could not switch the bookie to %s; retrying", "writable" if reason is None else "read-only")
            self._unreported = (reason,)
        else:
            self._unreported = None

    def _used(self) -> float | None:
        try:
            return self._measure(self._directories)
        except (OSError, ValueError) as exc:
            log.error("cannot read the disk usage of %s: %s", ", ".join(map(str, self._directories)), exc)
            return None
