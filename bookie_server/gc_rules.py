"""The garbage collector's pure decisions: which ledgers to delete, which entry logs to delete or compact.

No I/O, no clock, no threads: sets and maps in, decisions out.

Which ledgers. A ledger's metadata is created before any add reaches a
bookie, so a ledger the bookie holds and the metadata store does not list
was deleted, with two exceptions: the listing may be stale (a ZooKeeper
follower behind the leader, a listing that raced a creation) and a fence
of a ledger the bookie never saw creates local state (docs/protocol.md F4). Two rules
cover both: the local ledgers are read *before* the store is listed (so a
ledger created after the listing began is not a candidate), and a ledger
is deleted only when it was local and absent from the listing in two
consecutive successful passes, one GC interval apart (``LedgerSuspects``).
A failed listing decides nothing and keeps the suspects for the next pass.

Which over-replicated ledgers. After re-replication moved a bookie's copies
elsewhere (it was gone long enough to count as lost, then came back), the
ledger is CLOSED and no fragment names this bookie any more: its copies here
are left-overs (``unnamed_closed``). They are deleted only once the ledger has
been seen so for ``--gc-overreplicated-wait`` (a re-replication copies to its
target *before* the compare-and-set that names it: for a moment a fresh copy
looks just like a left-over), and never while this process stored one of its
entries within that wait. An OPEN ledger is never touched: an ensemble change
may still name this bookie. Finding them means reading every local ledger's
metadata, so it is done at most ``SCANS_PER_WAIT`` times per wait
(``overreplication_scan_due``), not on every GC pass: with the default wait
of a day, every 3 hours instead of every 5 minutes.

Which entry logs. A log can go once every ledger with entries in it is
``gone`` (deleted, and the deletion made durable) and it is not the newest
log on disk (the one being written, or the one that will be when the next
log id is chosen at start). A log whose map could not be rebuilt (pinned)
is never deleted. A log is worth compacting when the live share of its
bytes is above zero and below the compaction threshold.

When the current log is sealed early. Both rules above take sealed logs
only, and a log is sealed when it reaches ``--entry-log-size`` (1 GiB by
default): a bookie that wrote some ledgers and saw them deleted would keep
their bytes until more writes filled the log. So a pass seals the current
log ahead of time (``rotation_due``) when the sealed-log rules would take
it at once: it holds no live entry, or its live share is below the
compaction threshold. A log smaller than ``ROTATE_MIN_BYTES`` (16 MiB of
entries) is left to grow: sealing tiny logs over and over would buy little
space for a file, a map and a checkpoint each time; and each rotation frees
at least 80% of that (with the default threshold of 0.2).
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

from bookie_server.entry_log_usage import LogUsage
from pyspark_ledger.metadata.model import CLOSED, LedgerMetadata


class LedgerSuspects:
    """Remembers the ledgers found missing from the metadata store in the previous successful pass."""

    def __init__(self) -> None:
        self._suspects: set[int] = set()

    @property
    def suspects(self) -> frozenset[int]:
        return frozenset(self._suspects)

    def confirm(self, local: Iterable[int], listed: Iterable[int]) -> set[int]:
        """Ledgers to delete now: local (read before the listing) and absent from it now and the last time."""
        absent = set(local).difference(listed)
        confirmed = absent & self._suspects
        self._suspects = absent - confirmed
        return confirmed


def unnamed_closed(metadata: LedgerMetadata, bookie_id: str) -> bool:
    """A CLOSED ledger none of whose fragments names ``bookie_id``: its copies on that bookie are left-overs."""
    return metadata.state == CLOSED and all(bookie_id not in fragment.bookies for fragment in metadata.fragments)


SCANS_PER_WAIT = 8


def overreplication_scan_due(last_scan: float | None, now: float, wait_s: float) -> bool:
    """Whether this pass reads the local ledgers' metadata to find left-overs: on the first pass, then once
    ``wait_s / SCANS_PER_WAIT`` has passed since the last complete scan (a ledger left over for the wait
    is then deleted at most an eighth of the wait late)."""
    return last_scan is None or now - last_scan >= wait_s / SCANS_PER_WAIT


def deletable_logs(usage: Mapping[int, LogUsage], gone: Callable[[int], bool]) -> list[int]:
    """Logs none of whose ledgers is alive any more, except the newest log and pinned logs, ascending."""
    newest = max(usage, default=None)
    return sorted(log_id for log_id, log in usage.items()
                  if log_id != newest and log.pinned is None and all(map(gone, log.ledgers)))


def live_fraction(log: LogUsage, live: Callable[[int], bool]) -> float:
    """The share of the log's bytes that belongs to live ledgers (1.0 for an empty log: nothing to gain)."""
    total = log.total_bytes
    if total == 0:
        return 1.0
    return sum(nbytes for ledger_id, nbytes in log.ledgers.items() if live(ledger_id)) / total


def logs_to_compact(usage: Mapping[int, LogUsage], live: Callable[[int], bool],
                    threshold: float) -> list[int]:
    """Logs (not the newest, not pinned) with some live bytes, but a live share below ``threshold``,
    emptiest first."""
    newest = max(usage, default=None)
    fractions = {log_id: live_fraction(log, live) for log_id, log in usage.items()
                 if log_id != newest and log.pinned is None}
    return sorted((log_id for log_id, fraction in fractions.items() if 0 < fraction < threshold),
                  key=lambda log_id: (fractions[log_id], log_id))


ROTATE_MIN_BYTES = 16 * 1024 * 1024


def rotation_due(current: LogUsage | None, live: Callable[[int], bool], threshold: float,
                 min_bytes: int = ROTATE_MIN_BYTES) -> bool:
    """Whether to seal the current log now, because once sealed it would be collected at once: it is not
    pinned, holds at least ``min_bytes`` of entries, and either no live ledger (``deletable_logs``) or a live
    share above zero and below ``threshold`` (``logs_to_compact``)."""
    if current is None or current.pinned is not None or current.total_bytes < max(1, min_bytes):
        return False
    alive = [ledger_id for ledger_id in current.ledgers if live(ledger_id)]
    return not alive or 0 < live_fraction(current, live) < threshold
