"""Orphan ledgers: ledgers created for a stream that no partition log references, found and deleted.

A Spark write task creates its ledgers before the driver commits them
(``spark.sink_task``), and a log writer creates its next ledger before the
compare-and-set that adds it to the log (``log_writer``). A process killed in
between (an executor's ``kill -9``, a driver that dies before its commit or
abort) leaves a ledger that nothing references and nothing will delete. Every
such ledger carries its stream's name in its custom metadata
(``ledgers.STREAM_TAG``), so ``collect_orphans(stream, min_age_s)`` finds them:
ledgers tagged with the stream, in none of its partition logs nor its
``garbage``, created at least ``min_age_s`` ago (``LedgerMetadata.ctime_ms``,
the creating client's wall clock).

The sweep never deletes a ledger a log references, even racing a commit:

1. it reads the stream record and lists the candidates (a dry run stops here);
2. ONE compare-and-set of the stream record moves the candidates that are
   still unreferenced in the CURRENT record to its ``garbage`` list: a commit
   that won the race has them in a log, and they are skipped;
3. only then are they deleted, and forgotten (``retention.collect_garbage``;
   if the sweep dies in between, the next retention pass finishes it).

Every way a ledger enters a log (``commit_batch``, ``add_ledger``, the
overwrite commit) refuses a ledger listed in ``garbage``, and checks that its
ledgers still exist AFTER reading the record version it compare-and-sets on.
So a commit either lands before step 2 (the sweep skips the ledger), or fails
on the version step 2 changed, or reads a record where the ledger is garbage
or already deleted: it fails with a clear error and commits nothing. The worst
a too-small ``min_age_s`` can do is fail a job still running (its commit is
refused); it never loses committed data. Hence the generous default of one
hour: keep ``min_age_s`` above the longest write job plus the clock skew
between the machines that create ledgers and the one that sweeps. Ledgers
without a creation time (``ctime_ms`` 0) are never collected.

The search reads the metadata of every ledger in the store: run it as an
occasional maintenance task (``ledger streams gc STREAM``).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Iterable

from pyspark_ledger.errors import InvalidArgumentError, NoSuchLedgerError
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_stream_name
from pyspark_ledger.log.ledgers import PARTITION_TAG, STREAM_TAG
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_transitions import check_active, mark_orphans
from pyspark_ledger.log.retention import collect_garbage
from pyspark_ledger.log.stream_store import read_stream, update_stream
from pyspark_ledger.metadata.model import LedgerMetadata

log = logging.getLogger(__name__)
DEFAULT_MIN_AGE_S = 3600.0


@dataclass(frozen=True, slots=True)
class Orphan:
    """An unreferenced ledger of a stream: its id, the partition it was created for, state, size, age."""

    ledger_id: int
    partition: int | None
    state: str
    entries: int
    length: int
    ctime_ms: int
    age_s: float


@dataclass(frozen=True, slots=True)
class OrphanSweep:
    """What a sweep found and did.

    ``orphans``: the unreferenced ledgers old enough to collect, oldest first;
    ``deleted``: the ids among them deleted now (empty on a dry run; a ledger a
    commit took meanwhile is kept); ``young``: unreferenced ledgers kept because
    they are younger than ``min_age_s`` (or have no creation time).
    """

    stream: str
    min_age_s: float
    dry_run: bool
    orphans: tuple[Orphan, ...]
    deleted: frozenset[int]
    young: tuple[int, ...]


def collect_orphans(ctx: LogContext, stream: str, min_age_s: float = DEFAULT_MIN_AGE_S,
                    dry_run: bool = False) -> OrphanSweep:
    """Find and (unless ``dry_run``) delete the stream's orphan ledgers; see the module docstring."""
    stream = check_stream_name(stream)
    min_age_ms = _min_age_ms(min_age_s)
    record = check_active(read_stream(ctx.store, stream).value)
    now_ms = ctx.now_ms()
    orphans, young = [], []
    for metadata in unreferenced_ledgers(ctx, record):
        if metadata.ctime_ms > 0 and now_ms - metadata.ctime_ms >= min_age_ms:
            orphans.append(_orphan(metadata, now_ms))
        else:
            young.append(metadata.ledger_id)
    orphans.sort(key=lambda orphan: (orphan.ctime_ms, orphan.ledger_id))
    deleted: frozenset[int] = frozenset()
    if orphans and not dry_run:
        deleted = _delete(ctx, stream, [orphan.ledger_id for orphan in orphans])
    return OrphanSweep(stream, float(min_age_s), dry_run, tuple(orphans), deleted, tuple(young))


def unreferenced_ledgers(ctx: LogContext, record: StreamRecord) -> Iterable[LedgerMetadata]:
    """Metadata of the ledgers tagged with the stream that neither its logs nor its garbage list."""
    tag = record.name.encode()
    known = record.all_ledger_ids() | set(record.garbage)
    for ledger_id in ctx.client.list_ledgers():
        if ledger_id in known:
            continue
        try:
            metadata = ctx.client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue  # deleted since it was listed
        if metadata.custom_metadata.get(STREAM_TAG) == tag:
            yield metadata


def _delete(ctx: LogContext, stream: str, candidates: list[int]) -> frozenset[int]:
    """Step 2 (one CAS marks the still-unreferenced candidates as garbage), then step 3."""
    stored, _ = update_stream(ctx.store, stream, lambda current: mark_orphans(current, candidates))
    marked = set(candidates) & set(stored.value.garbage)
    skipped = sorted(set(candidates) - marked)
    if skipped:
        log.info("stream %r: ledgers %s were committed while the sweep ran; kept", stream, skipped)
    collected = collect_garbage(ctx, stream)
    deleted = frozenset(marked & collected)
    log.info("stream %r: deleted %d orphan ledgers %s", stream, len(deleted), sorted(deleted))
    return deleted


def _orphan(metadata: LedgerMetadata, now_ms: int) -> Orphan:
    partition = metadata.custom_metadata.get(PARTITION_TAG)
    try:
        partition_number = None if partition is None else int(partition.decode())
    except ValueError:
        partition_number = None
    entries = metadata.last_entry_id + 1 if metadata.is_closed else -1
    return Orphan(metadata.ledger_id, partition_number, metadata.state, entries,
                  metadata.length if metadata.is_closed else -1, metadata.ctime_ms,
                  round((now_ms - metadata.ctime_ms) / 1000, 3))


def _min_age_ms(min_age_s: float) -> int:
    if isinstance(min_age_s, bool) or not isinstance(min_age_s, (int, float)) or not 0 <= min_age_s < math.inf:
        raise InvalidArgumentError(
            f"min_age_s must be a finite number of seconds >= 0, got {min_age_s!r}: orphans younger than that are kept "
            f"(default {DEFAULT_MIN_AGE_S:g}; keep it above the longest write job)")
    return int(min_age_s * 1000)


__all__ = ["DEFAULT_MIN_AGE_S", "Orphan", "OrphanSweep", "collect_orphans", "unreferenced_ledgers"]
