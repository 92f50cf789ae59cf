"""The client process keeps freed heap memory for reuse once it writes large entries (glibc only).

A large add passes through several buffers in the client: its frame (the one
copy of the payload, ``add_wire``), then one gRPC buffer per bookie of its
write set. With glibc's defaults a freed megabyte goes back to the kernel
(blocks above the mmap threshold are unmapped, and the top of a heap is
trimmed once more than twice that threshold is free there), so the next
entry's buffers fault every page in again, zero-filled; on the VMs this
project is measured on those first touches cost more than the copies
(docs/measurements.md, "Client CPU per entry, issue 16").

``keep_freed_memory(config)`` raises the mmap threshold to ``MMAP_THRESHOLD``
and the trim threshold to ``TRIM_THRESHOLD`` once per process. The writer
calls it at its first entry of ``LARGE_ENTRY_BYTES`` or more, so a process
that writes only small entries is never changed. It does nothing when
``ClientConfig.keep_freed_memory`` is False, when the environment already
chose glibc's thresholds (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``), or when the C library is not
glibc. The price: up to ``TRIM_THRESHOLD`` of free memory per malloc arena
stays with the process instead of going back to the system.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

log = logging.getLogger(__name__)

LARGE_ENTRY_BYTES = 64 * 1024  # an add this large is written on its own (add_stream.WRITE_ALONE_BYTES)
MMAP_THRESHOLD = 32 * 1024 * 1024  # blocks up to this come from the heap (glibc's own largest dynamic value)
TRIM_THRESHOLD = 64 * 1024 * 1024  # free memory at the top of a heap kept for the next entries
_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_lock = threading.Lock()
_outcome: bool | None = None


def keep_freed_memory(enabled: bool = True) -> bool:
    """Raise glibc's mmap and trim thresholds for this process, once; True if they are in effect."""
    global _outcome
    if not enabled:
        return False
    with _lock:
        if _outcome is None:
            _outcome = _apply()
        return _outcome


def _apply() -> bool:
    if any(name in os.environ for name in _ENVIRONMENT) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        log.debug("malloc thresholds left as the environment chose them")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    applied = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not applied:
        log.info("could not raise the malloc thresholds: large entries cost more client CPU")
    return applied
