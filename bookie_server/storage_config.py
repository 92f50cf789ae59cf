"""The settings of a bookie's storage engine, validated when built.

Every size is in bytes and every duration in the unit its name says. A bad
value raises ``InvalidConfigurationError`` naming the field and what to use.
"""
from __future__ import annotations

import errno
import math
from dataclasses import dataclass
from pathlib import Path

from bookie_server.files import lock_directory
from pyspark_ledger.errors import InvalidConfigurationError, StorageError

MIB = 1024 * 1024
GIB = 1024 * MIB
MAX_ENTRY_LOG_PREALLOCATE = GIB  # the most ``entry_log_preallocate_bytes`` may be (an entry log's default size)

# Files and directories under data_dir (the journal may live elsewhere).
JOURNAL_DIR_NAME = "journal"
ENTRY_LOG_DIR_NAME = "entry_logs"
INDEX_DIR_NAME = "index"
LEDGER_SNAPSHOT_NAME = "ledgers.snapshot"
MARK_FILE_NAME = "lastmark"
LOCK_FILE_NAME = "storage.lock"


@dataclass(frozen=True)
class StorageConfig:
    """Where a bookie keeps its data and how it batches and rotates files.

    ``journal_max_wait_ms``: after the first record of a group commit is
    queued, the journal waits at most this long for more records before it
    writes and fsyncs (0 = write at once; under load the wait is usually
    already over when the journal thread comes back from the previous fsync).
    ``index_cache_bytes``: memory for cached index pages; when dirty pages
    exceed it a checkpoint is requested to flush them.
    ``journal_write_data``: False (the default) writes each entry's body once,
    to the entry log, and journals only a small reference to it; every group
    commit then fsyncs the entry logs before the journal (two fsyncs, half the
    bytes: best when journal and entry logs share a disk). True also copies
    every body into the journal, as BookKeeper does by default: one fsync per
    group commit, twice the bytes written (best with the journal on a disk
    of its own, ``journal_dir``). Either setting replays journals of both kinds.
    ``journal_inline_max_bytes``: with ``journal_write_data`` False, a body
    up to this size is still copied into the journal (an ADD record), and a
    group commit of such entries alone needs one fsync, not two: small
    entries get the latency of the copying journal, large ones keep being
    written once. 0 journals only references.
    ``journal_preallocate_bytes``: the journal file is extended with zeros this
    many bytes at a time, ahead of the records, so that a group commit's
    ``fdatasync`` overwrites blocks the file already has and changes no
    metadata: on ext4 such a sync needs no file-system journal commit, which
    would also wait for the entry logs' dirty pages (an add paced alone waited
    about twice as long without it). The zeros are written and fsync'd by a
    thread of their own, a step of at most 1 MiB at a time, so that no group
    commit writes them out with its records (docs/protocol.md B7). A file is cut to its records when it is
    rotated or closed; after a crash replay truncates the zeros as it does a
    torn tail. 0 appends without preallocating.
    ``entry_log_preallocate_bytes``: blocks are allocated for the current entry
    log this many bytes ahead of its records (``fallocate`` keeping the file's
    size: nothing a read or a scan sees changes), so that appends land in
    blocks the file has instead of ext4 reserving and allocating them page by
    page (about a tenth of a bookie's CPU per 1 MiB add). What is left past a
    log's records is given back when it is sealed or closed, and at the next
    start after a crash (docs/protocol.md B8). 0, or a file system that cannot,
    appends as the log grows. At most ``MAX_ENTRY_LOG_PREALLOCATE`` (1 GiB).
    ``entry_log_direct_io``: True writes the current entry log
    around the page cache (``O_DIRECT``): records are staged in a ring of
    aligned buffers (16 of 256 KiB), each written in whole blocks by a thread
    of their own as soon as it fills, each block once, with zeros after a
    sync's end (docs/protocol.md B9); False (the default), or a file system without
    direct I/O, writes through the page cache.
    """

    data_dir: Path
    journal_dir: Path | None = None
    journal_max_wait_ms: float = 0.0
    journal_max_batch_records: int = 10_000
    journal_max_batch_bytes: int = 32 * MIB
    journal_file_size: int = 512 * MIB
    entry_log_size: int = 1 * GIB
    checkpoint_interval_s: float = 30.0
    skip_journal_corruption: bool = False
    index_cache_bytes: int = 64 * MIB
    journal_write_data: bool = False
    journal_inline_max_bytes: int = 64 * 1024
    journal_preallocate_bytes: int = 4 * MIB
    entry_log_preallocate_bytes: int = 16 * MIB
    entry_log_direct_io: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", _as_path("data_dir", self.data_dir))
        if self.journal_dir is None:
            object.__setattr__(self, "journal_dir", self.data_dir / JOURNAL_DIR_NAME)
        else:
            object.__setattr__(self, "journal_dir", _as_path("journal_dir", self.journal_dir))
        _check_number("journal_max_wait_ms", self.journal_max_wait_ms, minimum=0)
        _check_int("journal_max_batch_records", self.journal_max_batch_records, minimum=1)
        _check_int("journal_max_batch_bytes", self.journal_max_batch_bytes, minimum=1)
        _check_int("journal_file_size", self.journal_file_size, minimum=1)
        _check_int("entry_log_size", self.entry_log_size, minimum=1)
        _check_number("checkpoint_interval_s", self.checkpoint_interval_s, minimum=0)
        _check_int("index_cache_bytes", self.index_cache_bytes, minimum=1)
        _check_int("journal_inline_max_bytes", self.journal_inline_max_bytes, minimum=0)
        _check_int("journal_preallocate_bytes", self.journal_preallocate_bytes, minimum=0)
        _check_int("entry_log_preallocate_bytes", self.entry_log_preallocate_bytes, minimum=0,
                   maximum=MAX_ENTRY_LOG_PREALLOCATE)
        for name in ("skip_journal_corruption", "journal_write_data", "entry_log_direct_io"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidConfigurationError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def entry_log_dir(self) -> Path:
        return self.data_dir / ENTRY_LOG_DIR_NAME

    @property
    def index_dir(self) -> Path:
        return self.data_dir / INDEX_DIR_NAME


def _as_path(name: str, value: object) -> Path:
    if isinstance(value, Path):
        return value
    if isinstance(value, str) and value:
        return Path(value)
    raise InvalidConfigurationError(f"{name} must be a directory path, got {value!r}")


def _check_int(name: str, value: object, *, minimum: int, maximum: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidConfigurationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidConfigurationError(f"{name} must be at most {maximum}, got {value!r}")


def _check_number(name: str, value: object, *, minimum: float) -> None:
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or value < minimum):
        raise InvalidConfigurationError(f"{name} must be a finite number >= {minimum}, got {value!r}")


def lock_data_dir(config: StorageConfig) -> int:
    """Lock ``config``'s data directory (``files.lock_directory``) for this process; a StorageError that says
    which directory is in use, and what to do, if another process holds it."""
    data_dir, lock_path = config.data_dir, config.data_dir / LOCK_FILE_NAME
    try:
        return lock_directory(lock_path)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise StorageError(f"data directory {data_dir} is in use by another bookie (lock {lock_path} is "
                               "held); stop it first or use another data_dir") from exc
        raise
