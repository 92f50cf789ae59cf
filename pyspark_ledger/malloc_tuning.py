"""glibc's malloc thresholds, raised for a process that moves megabyte buffers through Python.

Entry bodies and read answers of megabytes pass through gRPC buffers and Python
``bytes``. With glibc's defaults a freed block of that size goes back to the
kernel (blocks above the mmap threshold are unmapped; a thread arena's heap is
shrunk once more than the trim threshold is free at its top), so the next one
faults every page in again, zero-filled: on these VMs that costs more than the
copies themselves (docs/measurements.md, "Bookie memory tuning" and "Spark
reads: freed answers kept for reuse"). ``raise_thresholds`` sets both
thresholds (which also turns off glibc's own adjustment of them), and
optionally caps the number of malloc arenas, once per call. It leaves a process
alone when its environment chose any of them (``MALLOC_*_`` variables or a
``glibc.malloc`` tunable) and does nothing off glibc. The price: up to the trim
threshold of free memory stays with each arena of the process.
"""
from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: glibc's own largest dynamic mmap threshold on 64-bit systems, and the most a threshold here may be.
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024
MAX_TRIM_THRESHOLD = 1024 * 1024 * 1024
_ENV_CHOICES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX", "MALLOC_TOP_PAD_")


def chosen_by_environment(environ=os.environ) -> bool:
    """True if the process's environment already sets glibc's malloc parameters (then they are left alone)."""
    return any(name in environ for name in _ENV_CHOICES) or "glibc.malloc" in environ.get("GLIBC_TUNABLES", "")


def raise_thresholds(mmap_threshold: int, trim_threshold: int, arena_max: int | None = None) -> bool:
    """Set glibc's mmap and trim thresholds (and the arena cap, if given); True if all are in effect.

    ValueError for a threshold out of range (0 < mmap_threshold <= MAX_MMAP_THRESHOLD, mmap_threshold <=
    trim_threshold <= MAX_TRIM_THRESHOLD, arena_max >= 1).
    """
    if not 0 < mmap_threshold <= MAX_MMAP_THRESHOLD:
        raise ValueError(f"mmap_threshold must be 1..{MAX_MMAP_THRESHOLD} bytes, got {mmap_threshold}")
    if not mmap_threshold <= trim_threshold <= MAX_TRIM_THRESHOLD:
        raise ValueError(f"trim_threshold must be {mmap_threshold}..{MAX_TRIM_THRESHOLD} bytes, got {trim_threshold}")
    if arena_max is not None and arena_max < 1:
        raise ValueError(f"arena_max must be at least 1, got {arena_max}")
    if chosen_by_environment():
        log.info("malloc thresholds left as chosen in the environment")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    applied = mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1 and mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1
    if applied and arena_max is not None:
        applied = mallopt(M_ARENA_MAX, arena_max) == 1
    if not applied:
        log.warning("could not raise the malloc thresholds; large buffers will cost more CPU")
    return applied
