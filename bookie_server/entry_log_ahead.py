"""Blocks allocated ahead of the current entry log's records, and given back (docs/protocol.md B8).

``BlocksAhead`` keeps the current log's blocks allocated ``step`` bytes past its records
(``files.reserve_ahead``: the file's size, and so every read and scan, unchanged), so that appends land in
blocks the file already has instead of the file system allocating them page by page. ``give_back`` returns
what is left past a log's records once nothing more goes into it (sealed or closed), and ``give_back_left``
does so for a log found at open with more blocks than its size (a process killed before it sealed the log);
both truncate the file to its own size (``files.release_reserved``), which changes no byte. A file system that
cannot allocate ahead is appended to without from then on; a disk without room for the step, until the next
log. Used by ``EntryLogger`` under the storage lock; raises nothing (a failure costs space, never an add).
"""
from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from bookie_server.files import release_reserved, reserve_ahead

log = logging.getLogger(__name__)

PREALLOCATE_BYTES = 16 * 1024 * 1024  # ``StorageConfig.entry_log_preallocate_bytes``'s default
# A log whose allocated blocks pass its size by more than this was left with blocks allocated ahead (a crash).
# (A file's blocks also hold a little of its extent tree: never that much.)
_LEFT_SLACK = 256 * 1024


class BlocksAhead:
    """The current log's blocks allocated ahead (see the module docstring). ``end`` and ``step`` are read on the
    append path: ``reserve`` is called only when an append passes ``end`` and ``step`` is not 0."""

    def __init__(self, step: int, max_log_size: int) -> None:
        self.step = self._wanted = step  # ``step`` is 0 for the rest of this log after a refusal
        self.end = 0  # the current log's blocks are allocated up to here
        self._max_size = max_log_size
        self._held: set[int] = set()  # logs with blocks allocated ahead, not given back yet

    def new_log(self) -> None:
        """A new current log, with nothing allocated yet (a disk that was full tries again)."""
        self.end, self.step = 0, self._wanted

    def reserve(self, log_id: int, fd: int, path: Path, end: int) -> None:
        """Allocate the current log's blocks up to ``step`` past ``end``, never past the size at which it is
        sealed."""
        target = min(end + self.step, self._max_size)
        if target <= end:  # this append fills the log: the next one starts another
            return
        try:
            reserve_ahead(fd, self.end, target - self.end)
        except OSError as exc:
            lasting = exc.errno != errno.ENOSPC  # the file system cannot; a full disk may have room for the next log
            log.warning("entry log %s: cannot allocate blocks ahead of its records (%s); appending without%s",
                        path, exc, "" if lasting else " until the next log")
            self.step = 0
            if lasting:
                self._wanted = 0
            return
        self._held.add(log_id)
        self.end = target

    def give_back(self, log_id: int, fd: int, path: Path) -> None:
        """Give back what is allocated past a log's records, once nothing more goes into it."""
        if log_id not in self._held:
            return
        self._held.discard(log_id)
        try:
            release_reserved(fd)
        except OSError as exc:
            log.warning("entry log %s: cannot give back the blocks allocated past its records (%s); they are "
                        "freed when the log is deleted", path, exc)


def give_back_left(path: Path) -> None:
    """Give back blocks a log found at open holds past its size (allocated ahead by a process that stopped before
    it sealed the log): its bytes stay as they are. A failure only costs that space until the log is deleted."""
    try:
        info = path.stat()
        if info.st_blocks * 512 <= info.st_size + _LEFT_SLACK:
            return
        fd = os.open(path, os.O_WRONLY)
        try:
            release_reserved(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("entry log %s: cannot give back the blocks allocated past its records (%s)", path, exc)
