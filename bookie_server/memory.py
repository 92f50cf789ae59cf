"""Process memory tuning of a bookie: keep freed heap memory for reuse instead of handing it back at once.

A bookie moves entry bodies of up to megabytes through gRPC buffers, protobuf
messages and Python bytes objects, several copies per entry. With glibc's
defaults a freed megabyte goes back to the kernel (the top of a thread's heap
is trimmed past 2× the mmap threshold; larger blocks are mmap'd and unmapped),
so the next body faults every page in again, zero-filled. On VMs that report
free memory back to their host those first touches can cost more than the
copies themselves, and the thresholds below save a good share of the bookie's
CPU per large entry (figures: docs/measurements.md, "Bookie memory tuning").
The price is that up to
``TRIM_THRESHOLD`` of free memory per malloc arena stays with the process, and
glibc never shrinks a thread arena's heap below that, not even in
``malloc_trim`` (which trims only the main arena's top). glibc makes up to 8
arenas per core, one for each new thread that finds the others busy, so a
bookie reading add streams on many threads keeps free memory in each of many
arenas that no trim gives back. So the number of arenas is capped at
``ARENA_MAX``, which more than halves what such streams leave behind, at some
CPU for small adds where gRPC's own threads share an arena.

``keep_freed_memory()`` applies it once per process (``pyspark_ledger.malloc_tuning``: glibc only; anything
else, or thresholds already chosen through the environment, is left as it is).

After a burst of adds (a hostile batch of many tiny adds, a flood of large
entries) the kept memory would stay with the bookie; ``BurstTrimmer`` hands
it back with ``malloc_trim`` once the bookie is quiet again, off the add path. Memory can also pile up
without any one burst: many moderate batches, each read by another stream's thread, each leave up to
``TRIM_THRESHOLD`` free in their own malloc arena. So the trimmer also looks at the process's resident
size every ``check_s`` and trims when it is more than ``rss_slack`` above what the bookie had when it
started plus what it holds in flight (``over_slack``).
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from typing import Callable

from pyspark_ledger.malloc_tuning import raise_thresholds

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 32 * 1024 * 1024  # blocks up to this come from the heap (glibc's own dynamic maximum)
TRIM_THRESHOLD = 64 * 1024 * 1024  # free memory at a heap's top kept for reuse
ARENA_MAX = 4  # malloc arenas besides the main one: each keeps up to TRIM_THRESHOLD free at its top

_applied: bool | None = None
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds for this process (once); True if they are in effect."""
    global _applied
    with _lock:
        if _applied is None:
            _applied = raise_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD, ARENA_MAX)
        return _applied


def give_back_memory() -> bool:
    """glibc's ``malloc_trim(0)``: hand free heap memory of every arena back to the system; False if not glibc."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    trim(0)
    return True


def resident_bytes() -> int:
    """This process's resident set size (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def over_slack(resident: int, floor: int, in_flight: int, slack: int) -> bool:
    """Whether a process holding ``resident`` bytes keeps more than ``slack`` it does not use: ``floor`` is its
    resident size when it started serving, ``in_flight`` the bytes of requests it holds now."""
    return resident > 0 and resident > floor + in_flight + slack


class BurstTrimmer:
    """Gives memory back after a burst of adds, off the add path.

    The thresholds above keep freed memory for speed; after a burst (the bookie-wide bytes in flight
    peaked at ``after_bytes`` or more; by default the trim threshold itself, so steady writing, which
    holds less, never pays for pages faulted in again) that memory would stay with the process. ``bytes_freed`` is called
    when the in-flight bytes fall to zero; a background thread then waits ``quiet_s`` and, if the bookie
    still holds less than ``after_bytes``, trims (at most once per ``min_interval_s``). Every ``check_s`` the
    thread also trims if the resident size is ``rss_slack`` over the start's plus the bytes in flight.
    """

    def __init__(self, budget, *, after_bytes: int = TRIM_THRESHOLD,
                 quiet_s: float = 1.0, min_interval_s: float = 10.0, check_s: float = 5.0,
                 rss_slack: int = 2 * TRIM_THRESHOLD, on_trim: Callable[[], None] = lambda: None) -> None:
        self._budget = budget  # a limits.Budget: .used, .peak, .take_peak()
        self._after = after_bytes
        self._check_s, self._rss_slack = check_s, rss_slack
        self._rss_floor = resident_bytes()
        self._quiet_s, self._min_interval_s = quiet_s, min_interval_s
        self._on_trim = on_trim
        self._wake = threading.Event()
        self._stopped = False
        self._last_trim = 0.0
        self._thread = threading.Thread(target=self._run, name="bookie-memory-trim", daemon=True)
        self._thread.start()

    def bytes_freed(self, amount: int = 0) -> None:
        """Cheap: called by add streams whenever the bookie's in-flight bytes fall to zero, and with the size
        of a batch refused as a whole (it was held without being charged)."""
        if not self._wake.is_set() and (self._budget.peak >= self._after or amount >= self._after):
            self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while True:
            if not self._wake.wait(self._check_s):
                if self._stopped:
                    return
                if time.monotonic() - self._last_trim < self._min_interval_s or not over_slack(
                        resident_bytes(), self._rss_floor, self._budget.used, self._rss_slack):
                    continue
                self._wake.set()  # trim now, as after a burst
            if self._stopped:
                return
            wait = max(self._quiet_s, self._last_trim + self._min_interval_s - time.monotonic())
            time.sleep(wait)
            self._wake.clear()
            if self._stopped:
                return
            if self._budget.used < self._after:
                self._budget.take_peak()
                started = time.monotonic()
                if give_back_memory():
                    self._on_trim()
                self._last_trim = time.monotonic()
                log.debug("memory handed back after a burst of adds (%.1f ms)", (self._last_trim - started) * 1e3)
