"""Writing a checkpoint's index page copies to the ledgers' files, many ledgers at once.

``write_ledgers`` groups page copies by ledger and hands each ledger's pages to ``write_ledger`` (the
index's seam, ``LedgerIndex._write_ledger``) in up to ``WRITE_THREADS`` threads, then fsyncs the
directories that gained files. A new ledger's file costs a directory, a temp file, a rename and three
fsyncs, each waiting for the disk; the waits of many ledgers overlap (their fsyncs share the file
system's journal commits and cache flushes).

One ledger's failure stays that ledger's: it is returned (ledger -> error) and the others are written.
A full or read-only disk (ENOSPC, EDQUOT, EROFS) is the disk's condition, not one ledger's: it is raised,
and the checkpoint fails as a whole.

Thread-safe as long as ``write_ledger`` is for distinct ledgers.
"""
from __future__ import annotations

import errno
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

from bookie_server.files import fsync_dir

__all__ = ["WRITE_THREADS", "WHOLE_DISK_ERRORS", "write_ledgers"]

#: ledgers whose index files one checkpoint writes at once
WRITE_THREADS = 8
#: errors that say the disk, not one ledger's file, cannot be written
WHOLE_DISK_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class _Copy(Protocol):
    ledger_id: int


WriteLedger = Callable[[int, list, dict[Path, list[int]]], None]


def write_ledgers(copies: Sequence[_Copy], write_ledger: WriteLedger) -> dict[int, Exception]:
    """Write and fsync ``copies``, each ledger's by one ``write_ledger(ledger_id, pages, new_parents)`` call;
    return the ledgers that failed. ``write_ledger`` records in ``new_parents`` the directories it created
    files in (directory -> ledger ids), whose entries are fsync'd here once every ledger is written."""
    by_ledger: dict[int, list] = defaultdict(list)
    for copy in copies:
        by_ledger[copy.ledger_id].append(copy)

    def write(item: tuple[int, list]) -> tuple[int, dict[Path, list[int]], Exception | None]:
        ledger_id, pages = item
        parents: dict[Path, list[int]] = defaultdict(list)
        try:
            write_ledger(ledger_id, pages, parents)
        except (OSError, OverflowError, ValueError) as exc:
            return ledger_id, parents, exc
        return ledger_id, parents, None

    new_parents: dict[Path, list[int]] = defaultdict(list)
    failed: dict[int, Exception] = {}
    whole_disk: OSError | None = None
    for ledger_id, parents, exc in _map(write, by_ledger.items()):
        for parent, ledger_ids in parents.items():
            new_parents[parent].extend(ledger_ids)
        if isinstance(exc, OSError) and exc.errno in WHOLE_DISK_ERRORS:
            whole_disk = whole_disk or exc
        elif exc is not None:
            failed[ledger_id] = exc
    if whole_disk is not None:
        raise whole_disk

    def sync(parent: Path) -> OSError | None:
        try:
            fsync_dir(parent)
        except OSError as exc:
            return exc
        return None

    for (parent, ledger_ids), exc in zip(new_parents.items(), _map(sync, new_parents)):
        if exc is None:
            continue
        if exc.errno in WHOLE_DISK_ERRORS:
            whole_disk = whole_disk or exc
        failed.update(dict.fromkeys(ledger_ids, exc))
    if whole_disk is not None:
        raise whole_disk
    return failed


def _map(function: Callable, items: Iterable) -> list:
    """``function`` over ``items`` in up to ``WRITE_THREADS`` threads (in this one for a single item), results
    in order; an exception other than those ``function`` returns is raised once every call has ended."""
    items = list(items)
    if len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(WRITE_THREADS, len(items)), thread_name_prefix="index-write") as pool:
        return list(pool.map(function, items))
