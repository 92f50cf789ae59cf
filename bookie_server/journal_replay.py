"""Journal replay at start-up: read every record after the checkpoint mark, in order.

Corruption policy (``damage_verdict``):
  * a torn tail of the newest file is what a crash leaves behind: it is
    ignored and truncated away, so the file is clean for later starts. In a
    version 2 file (see ``journal_format``) the tail is torn when no valid
    COMMIT record follows the first bad byte: the last group commit's write
    did not finish, so none of it was acknowledged. In a version 1 file (no
    COMMIT records) it is torn when no valid record at all follows;
  * anything else (a bad record with a valid COMMIT after it, so inside an
    acknowledged group or before one; in version 1 a bad record followed by
    valid ones; a bad record in an older file; a file shorter than the mark
    says; the mark's file missing) raises ``JournalCorruptError`` naming the
    file and offset, unless ``skip_corruption``: then it is logged, counted in
    ``ReplayResult.skipped_regions``, and replay resumes at the next valid
    record (data in the damaged region is lost).

Residual ambiguity: a crash may leave the last group's COMMIT record on disk
and an earlier page of the same write not (the kernel writes pages back in
any order). Replay then refuses to start, as for damage: the operator checks
and starts with the skip flag; an acknowledged record is never dropped silently.
"""
from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bookie_server.journal import JournalMark, journal_files, journal_path
from bookie_server.journal_format import (COMMIT, FILE_HEADER, FRAMING_KINDS, VERSION, JournalRecord, file_version,
                                          HEADER_SIZE, find_next_record, parse_record)
from bookie_server.journal_scan import OnAdd, scan_records
from pyspark_ledger.errors import JournalCorruptError, StorageError

log = logging.getLogger(__name__)

NO_MARK = JournalMark(0, 0)
FIRST_FILE_ID = NO_MARK.file_id + 1  # a new journal's first file (``replay_journal``'s next_file_id)
HOW_TO_SKIP = ("The bookie refuses to start because entries it acknowledged may be lost. To start anyway, "
                "skipping what cannot be read, start it with --skip-journal-corruption "
                "(StorageConfig.skip_journal_corruption=True); the skipped entries are then read from other "
                "replicas")
TORN = "torn"
DAMAGE = "damage"


@dataclass
class ReplayResult:
    records: int = 0
    files: int = 0
    truncated_bytes: int = 0
    skipped_regions: int = 0
    next_file_id: int = 1


def replay_journal(directory: Path, mark: JournalMark, skip_corruption: bool,
                   apply: Callable[[JournalRecord], None], apply_add: OnAdd | None = None) -> ReplayResult:
    """Feed every record from ``mark`` on to ``apply`` (ADD records to ``apply_add(ledger id, entry id, body)`` if
    given, the body a view valid only during the call); return counts and the id for a new file."""
    files = journal_files(directory)
    result = ReplayResult(next_file_id=max([mark.file_id] + [file_id for file_id, _ in files]) + 1)
    if mark != NO_MARK and mark.file_id not in {file_id for file_id, _ in files}:
        _corrupt(result, skip_corruption, f"journal file {journal_path(directory, mark.file_id)} named by the "
                 f"checkpoint mark (offset {mark.offset}) is missing")
    todo = [(file_id, path) for file_id, path in files if file_id >= mark.file_id]
    for position, (file_id, path) in enumerate(todo):
        start = mark.offset if file_id == mark.file_id else 0
        _replay_file(path, start, position == len(todo) - 1, skip_corruption, apply, apply_add, result)
        result.files += 1
    return result


def damage_verdict(version: int, newest: bool, valid_after: bool, commit_after: bool) -> str:
    """TORN (a crash's unacknowledged tail: truncate it) or DAMAGE (acknowledged records may be lost) for a
    bad record in a file of format ``version``; ``newest``: the file is the last one; ``valid_after`` /
    ``commit_after``: a valid record / a valid COMMIT record lies after the bad one in the file."""
    if not newest:
        return DAMAGE  # a file is closed only after its last group commit was fsync'd
    if version >= 2:
        return DAMAGE if commit_after else TORN
    return DAMAGE if valid_after else TORN


def _replay_file(path: Path, start: int, newest: bool, skip_corruption: bool, apply: Callable[[JournalRecord], None],
                 apply_add: OnAdd | None, result: ReplayResult) -> None:
    """The records of one file: read in large chunks up to the first record that does not parse (``scan_records``),
    then, only if there is one, the file is mapped and judged from there the record-by-record way."""
    with open(path, "rb", buffering=0) as file:
        size = os.fstat(file.fileno()).st_size
        if start > size:
            _corrupt(result, skip_corruption, f"journal file {path} has {size} bytes but the checkpoint mark "
                     f"says {start} were durable")
            return
        if start == size:
            return
        version = _quick_version(file.fileno(), size)
        if version is not None:
            _check_version(path, version)
            bad, applied = scan_records(file.fileno(), start, size, apply_add, apply)
            result.records += applied
            if bad == size:
                return
            start = bad
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            torn_at = _replay_mapped(path, buf, start, size, newest, skip_corruption, apply, result)
            zeros_only = torn_at is not None and _all_zeros(buf, torn_at, size)
    if torn_at is not None:
        _truncate(path, torn_at, size, zeros_only)
        result.truncated_bytes += size - torn_at


def _all_zeros(buf, start: int, end: int) -> bool:
    """Whether ``buf[start:end]`` holds only zero bytes (the journal's preallocated space), a megabyte at a time."""
    step = 1 << 20
    return all(not buf[offset:min(end, offset + step)].strip(b"\0") for offset in range(start, end, step))


def _quick_version(fd: int, size: int) -> int | None:
    """The version a FILE_HEADER at the file's start names, or None if none is there (``file_version`` decides)."""
    head = os.pread(fd, HEADER_SIZE + 2, 0)
    record = parse_record(head, 0, len(head))
    return record.entry_id if isinstance(record, JournalRecord) and record.kind == FILE_HEADER else None


def _check_version(path: Path, version: int) -> None:
    if version > VERSION:
        raise StorageError(f"journal file {path} has format version {version}; this bookie reads versions "
                           f"up to {VERSION}: start it with the newer bookie version that wrote it")


def _replay_mapped(path: Path, buf, offset: int, size: int, newest: bool, skip_corruption: bool,
                   apply: Callable[[JournalRecord], None], result: ReplayResult) -> int | None:
    """Record by record from ``offset``, judging every bad record (see the module docstring); the offset of a
    torn tail to truncate, or None."""
    version = file_version(buf, size)
    _check_version(path, version)
    while offset < size:
        record = parse_record(buf, offset, size)
        if isinstance(record, JournalRecord):
            if record.kind not in FRAMING_KINDS:
                apply(record)
                result.records += 1
            offset = record.end
            continue
        resume = find_next_record(buf, offset + 1, size)
        commit = find_next_record(buf, offset + 1, size, COMMIT) if version >= 2 and resume is not None \
            else None
        if damage_verdict(version, newest, resume is not None, commit is not None) == TORN:
            return offset
        _corrupt(result, skip_corruption, f"journal file {path} is corrupt at offset {offset} ({record}) and "
                 f"{_why_acknowledged(buf, size, newest, resume, commit)}")
        if resume is None:
            return None
        offset = resume
    return None


def _why_acknowledged(buf, size: int, newest: bool, resume: int | None, commit: int | None) -> str:
    if commit is not None:
        group = parse_record(buf, commit, size).commit
        return (f"a valid group commit record at offset {commit} (closing {group.records} records from offset "
                f"{commit - group.length}) follows, so the damaged record was written before an fsync that "
                "acknowledged it")
    if resume is not None:
        return f"valid records follow at offset {resume}"
    return "it is not the newest journal file" if not newest else "it is not the journal's tail"


def _truncate(path: Path, length: int, size: int, zeros_only: bool = False) -> None:
    if zeros_only:  # what a running journal preallocates (``journal_preallocate_bytes``), left by a stop or a crash
        log.info("journal %s: cutting %d preallocated bytes after its last record (offset %d)", path, size - length,
                 length)
    else:
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
    log.error("JOURNAL DAMAGE: %s; skipping it because skip_journal_corruption is set (data there is lost on "
              "this bookie)", message)
