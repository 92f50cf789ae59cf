"""Entry-log pages sent to the disk as they pile up, in the background, instead of in a burst at the checkpoint.

Entry-log appends stay in the page cache until something writes them: the checkpoint's fsync (every
``checkpoint_interval_s``), the journal's ``before_write`` when it holds references, or the kernel's flusher
once they are ``dirty_expire_centisecs`` old (30 s by default). After a burst of small adds that is tens of
megabytes per bookie at once, and a journal ``fdatasync`` that falls meanwhile waits behind them in the
device's queue: the paced add's latency tail (docs/measurements.md, "The paced add, stage by stage").

``Writeback(step, ranges)``: ``written(nbytes)`` counts appended bytes (on the appending thread, cheap); each
time ``step`` more are appended it wakes this module's thread, which asks ``ranges()`` for ``(fd, start, end)``
of what was appended since and starts their writeback with ``sync_file_range(SYNC_FILE_RANGE_WRITE)``: the
kernel queues the pages and the call returns without waiting for them to reach the disk (it may wait for
room in the device's queue: on this thread, not an add's). Nothing is claimed durable because of it: fsync
still does that, and reports any error of these writes too (the kernel records it for the file). The thread
sleeps while nothing is appended; where ``sync_file_range`` does not exist (not Linux) nothing starts.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)

SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the dirty pages in the range, do not wait
WRITEBACK_STEP = 8 * 1024 * 1024  # appended bytes between two writebacks


def _load_sync_file_range():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)  # releases the GIL in calls
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range = _load_sync_file_range()


def start_writeback(fd: int, start: int, end: int) -> bool:
    """Queue the dirty pages of ``[start, end)`` of ``fd`` for writing; False if it could not (no harm done)."""
    if _sync_file_range is None or end <= start:
        return False
    if _sync_file_range(fd, start, end - start, SYNC_FILE_RANGE_WRITE) != 0:
        log.debug("sync_file_range(%d, %d, %d) failed: errno %d", fd, start, end - start, ctypes.get_errno())
        return False
    return True


class Writeback:
    """The writeback thread of one entry logger (see the module docstring)."""

    def __init__(self, ranges: Callable[[], list[tuple[int, int, int]]], step: int = WRITEBACK_STEP) -> None:
        self._ranges = ranges
        self._step = step
        self._pending = 0
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None
        self.started = 0  # ranges whose writeback was started (for tests and curiosity)

    def written(self, nbytes: int) -> None:
        """``nbytes`` more were appended; every ``step`` bytes the thread starts their writeback."""
        self._pending += nbytes
        if self._pending < self._step or _sync_file_range is None:
            return
        self._pending = 0
        if self._thread is None:  # started at the first step: a bookie that takes no adds has no such thread
            self._thread = threading.Thread(target=self._run, name="entry-log-writeback", daemon=True)
            self._thread.start()
        self._wake.set()

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            try:
                for fd, start, end in self._ranges():
                    if start_writeback(fd, start, end):
                        self.started += 1
            except Exception:  # noqa: BLE001 - a writeback is an optimisation: never let it stop the bookie
                log.exception("starting the writeback of entry logs failed")
