"""Process memory tuning of a bookie: keep freed heap memory for reuse instead of handing it back at once.

A bookie moves entry bodies of up to megabytes through gRPC buffers, protobuf
messages and Python bytes objects, several copies per entry. With glibc's
defaults a freed megabyte goes back to the kernel (the top of a thread's heap
is trimmed past 2× the mmap threshold; larger blocks are mmap'd and unmapped),
so the next body faults every page in again, zero-filled. On this project's VMs
(free memory reported back to the host) those first touches cost more than the
copies themselves: measured with 1 MiB entries, the bookie's CPU per entry fell
by about a quarter with the thresholds below. The price is that up to
``TRIM_THRESHOLD`` of free memory per malloc arena stays with the process.

``keep_freed_memory()`` applies it once per process (glibc only; anything else,
or thresholds already chosen through the environment, is left as it is).
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # blocks up to this come from the heap (glibc's own dynamic maximum)
TRIM_THRESHOLD = 64 * 1024 * 1024  # free memory at a heap's top kept for reuse
_ENV_CHOICES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")

_applied: bool | None = None
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds for this process (once); True if they are in effect."""
    global _applied
    with _lock:
        if _applied is None:
            _applied = _apply()
        return _applied


def _apply() -> bool:
    if any(name in os.environ for name in _ENV_CHOICES) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        log.info("malloc thresholds left as chosen in the environment")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    applied = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not applied:
        log.warning("could not raise the malloc thresholds; large entries will cost more CPU")
    return applied
