"""Journal replay at start-up: read every record after the checkpoint mark, in order.

Corruption policy:
  * a torn tail of the newest file (a partial, zero-filled or checksum-bad
    last record with no valid record after it) is what a crash leaves behind:
    it is ignored and truncated away, so the file is clean for later starts;
  * anything else (a bad record followed by valid ones, a bad record in an
    older file, a file shorter than the mark says, the mark's file missing)
    raises ``JournalCorruptError`` naming the file and offset, unless
    ``skip_corruption``: then it is logged and replay resumes at the next
    valid record (data in the damaged region is lost).
"""
from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bookie_server.journal import JournalMark, journal_files, journal_path
from bookie_server.journal_format import JournalRecord, find_next_record, parse_record
from pyspark_ledger.errors import JournalCorruptError

log = logging.getLogger(__name__)

NO_MARK = JournalMark(0, 0)
HOW_TO_SKIP = ("The bookie refuses to start because entries it acknowledged may be lost. To start anyway, "
                "skipping what cannot be read, set StorageConfig.skip_journal_corruption=True.")


@dataclass
class ReplayResult:
    records: int = 0
    files: int = 0
    truncated_bytes: int = 0
    skipped_regions: int = 0
    next_file_id: int = 1


def replay_journal(directory: Path, mark: JournalMark, skip_corruption: bool,
                   apply: Callable[[JournalRecord], None]) -> ReplayResult:
    """Feed every record from ``mark`` on to ``apply``; return counts and the id for a new file."""
    files = journal_files(directory)
    result = ReplayResult(next_file_id=max([mark.file_id] + [file_id for file_id, _ in files]) + 1)
    if mark != NO_MARK and mark.file_id not in {file_id for file_id, _ in files}:
        _corrupt(result, skip_corruption, f"journal file {journal_path(directory, mark.file_id)} named by the "
                 f"checkpoint mark (offset {mark.offset}) is missing")
    todo = [(file_id, path) for file_id, path in files if file_id >= mark.file_id]
    for position, (file_id, path) in enumerate(todo):
        start = mark.offset if file_id == mark.file_id else 0
        _replay_file(path, start, position == len(todo) - 1, skip_corruption, apply, result)
        result.files += 1
    return result


def _replay_file(path: Path, start: int, newest: bool, skip_corruption: bool,
                 apply: Callable[[JournalRecord], None], result: ReplayResult) -> None:
    size = path.stat().st_size
    if start > size:
        _corrupt(result, skip_corruption, f"journal file {path} has {size} bytes but the checkpoint mark "
                 f"says {start} were durable")
        return
    if start == size:
        return
    torn_at = None
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        offset = start
        while offset < size:
            record = parse_record(buf, offset, size)
            if isinstance(record, JournalRecord):
                apply(record)
                result.records += 1
                offset = record.end
                continue
            resume = find_next_record(buf, offset + 1, size)
            if resume is None and newest:
                torn_at = offset
                break
            where = "valid records follow at offset {}".format(resume) if resume is not None else \
                "it is not the newest journal file"
            _corrupt(result, skip_corruption,
                     f"journal file {path} is corrupt at offset {offset} ({record}) and {where}")
            if resume is None:
                break
            offset = resume
    if torn_at is not None:
        _truncate(path, torn_at, size)
        result.truncated_bytes += size - torn_at


def _truncate(path: Path, length: int, size: int) -> None:
    log.warning("journal %s: ignoring a torn tail of %d bytes at offset %d (left by a crash); truncating it",
                path, size - length, length)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, length)
        os.fsync(fd)
    finally:
        os.close(fd)


def _corrupt(result: ReplayResult, skip_corruption: bool, message: str) -> None:
    if not skip_corruption:
        raise JournalCorruptError(f"{message}. {HOW_TO_SKIP}")
    result.skipped_regions += 1
    log.error("%s; skipping it because skip_journal_corruption is set (data there is lost)", message)
