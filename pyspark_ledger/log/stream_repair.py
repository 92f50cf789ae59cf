"""Repairing a stream's record that refers to lost ledgers (their metadata deleted under the stream).

Sequence numbers of a log are never reused nor shifted, since readers'
checkpoints are positions ``seq:entry``. So a lost ledger can be dropped from
a partition's log only at its head: that is a truncation (``first_seq`` moves
past it; ``truncated_end`` is cleared, so a reader checkpointed before the loss
gets DataLossError rather than silently moving on). A lost ledger after an
intact one stays listed: dropping it would renumber the ledgers after it; the
result says so, and readers skip it with failOnDataLoss=false.

Repairing needs the stream's password, or a client holding the repair key.
``dry_run`` only reports.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark_ledger.errors import NoSuchLedgerError
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_stream_name
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_transitions import check_active
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.log.stream_password import check_record, verify_password
from pyspark_ledger.log.stream_store import read_stream, update_stream


@dataclass(frozen=True, slots=True)
class LostLedger:
    """A ledger of a partition's log whose metadata is gone; ``dropped`` if the repair removed it."""

    partition: int
    ledger_id: int
    ledger_seq: int
    dropped: bool

    @property
    def start(self) -> LogPosition:
        return LogPosition(self.ledger_seq, 0)

    @property
    def end(self) -> LogPosition:
        return LogPosition(self.ledger_seq + 1, 0)


@dataclass(frozen=True, slots=True)
class RepairResult:
    stream: str
    dry_run: bool
    lost: tuple[LostLedger, ...]


def repair_stream(ctx: LogContext, name: str, *, dry_run: bool = False) -> RepairResult:
    """Drop the lost ledgers at the head of each partition's log (see the module docstring)."""
    name = check_stream_name(name)
    if ctx.client.repair_key_id is None:
        verify_password(ctx, name, write=False)
    record = check_active(read_stream(ctx.store, name).value)
    missing = {ledger_id for ledger_id in record.all_ledger_ids() if _gone(ctx, ledger_id)}
    if not missing:
        return RepairResult(name, dry_run, ())
    if dry_run:
        return RepairResult(name, True, _lost(record, missing))

    def transition(current: StreamRecord) -> StreamRecord | None:
        check_active(current)
        if ctx.client.repair_key_id is None:
            check_record(ctx, current)
        after = _drop_heads(current, missing)
        return None if after == current else after

    before = check_active(read_stream(ctx.store, name).value)
    update_stream(ctx.store, name, transition)
    return RepairResult(name, False, _lost(before, missing))


def _gone(ctx: LogContext, ledger_id: int) -> bool:
    try:
        ctx.client.ledger_metadata(ledger_id)
    except NoSuchLedgerError:
        return True
    return False


def _head_count(ledger_ids: tuple[int, ...], missing: set[int]) -> int:
    count = 0
    while count < len(ledger_ids) and ledger_ids[count] in missing:
        count += 1
    return count


def _drop_heads(record: StreamRecord, missing: set[int]) -> StreamRecord:
    for partition, part in enumerate(record.partitions):
        count = _head_count(part.ledger_ids, missing)
        if count:
            record = record.with_partition(partition, replace(
                part, first_seq=part.first_seq + count, ledgers=part.ledgers[count:], truncated_end=None))
    return record


def _lost(record: StreamRecord, missing: set[int]) -> tuple[LostLedger, ...]:
    lost = []
    for partition, part in enumerate(record.partitions):
        head = _head_count(part.ledger_ids, missing)
        for index, (seq, ref) in enumerate(part.with_seqs()):
            if ref.ledger_id in missing:
                lost.append(LostLedger(partition, ref.ledger_id, seq, dropped=index < head))
    return tuple(lost)
