"""The replay hint: where the entry log was when a checkpoint took the journal mark it persisted.

A checkpoint writes it (``write_hint``) after the mark; replay reads it
(``read_hint``) to start looking for journal bodies already in the entry logs
(``replay_in_place``) near the first one instead of at the oldest log. It is
advice only: every body found through it is checked against the journal, so
a missing, damaged, stale or wrong hint only makes replay append bodies
again. That is why it is written without an fsync, and why reading it never
fails: anything but a well-formed hint for this very mark is no hint.

File ``replay.hint`` in the data directory: magic ``PLRH``, the mark (journal
file id u64, offset u64), the entry log position (log id u64, offset u64),
crc32c u32 of the bytes before it; big-endian.
"""
from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from typing import Callable

import crc32c

from bookie_server.entry_log import HEADER_SIZE
from bookie_server.journal import JournalMark

log = logging.getLogger(__name__)

HINT_FILE_NAME = "replay.hint"
_MAGIC = b"PLRH"
_HINT = struct.Struct(">4sQQQQ")
_CRC = struct.Struct(">I")


def write_hint(data_dir: Path, mark: JournalMark, position: tuple[int, int] | None) -> None:
    """Record the entry-log ``position`` (log id, offset) seen when ``mark`` was taken; None removes the hint.
    Failures are logged, never raised (a hint is advice)."""
    path = data_dir / HINT_FILE_NAME
    try:
        if position is None:
            path.unlink(missing_ok=True)
            return
        data = _HINT.pack(_MAGIC, mark.file_id, mark.offset, position[0], position[1])
        temp = path.with_name(HINT_FILE_NAME + ".tmp")
        temp.write_bytes(data + _CRC.pack(crc32c.crc32c(data)))
        os.replace(temp, path)
    except OSError as exc:
        log.debug("cannot write the replay hint %s: %s", path, exc)


def read_hint(data_dir: Path, mark: JournalMark) -> tuple[int, int] | None:
    """The entry-log position of a well-formed hint written for ``mark``, else None."""
    try:
        data = (data_dir / HINT_FILE_NAME).read_bytes()
    except OSError:
        return None
    if len(data) != _HINT.size + _CRC.size or _CRC.unpack_from(data, _HINT.size)[0] != crc32c.crc32c(data[:_HINT.size]):
        return None
    magic, file_id, offset, log_id, log_offset = _HINT.unpack_from(data)
    if magic != _MAGIC or JournalMark(file_id, offset) != mark:
        return None
    return log_id, log_offset


class DurableLogEnd:
    """Where the entry-log bodies of the last durable add group end: the position a checkpoint's hint records.

    Journal callbacks run in group order, after the journal's mark moved past the group, so the position read
    before a mark is taken is at or before the bodies of the first add group after that mark."""

    def __init__(self) -> None:
        self._end: tuple[int, int] | None = None

    def get(self) -> tuple[int, int] | None:
        return self._end

    def noting(self, callback: Callable[[bool], None], last: tuple[int, int, int]) -> Callable[[bool], None]:
        """``callback`` of an add group whose last body is at ``last`` (log id, offset, length), noting its end
        first when the group is durable."""
        end = (last[0], last[1] + HEADER_SIZE + last[2])

        def done(durable: bool) -> None:
            if durable:
                self._end = end
            callback(durable)
        return done
