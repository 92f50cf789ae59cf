"""Which streams refer to a ledger, and where: what deleting that ledger would break.

A stream's record lists each partition's ledgers (``log_metadata``); a ledger
listed there holds a range of the stream: the positions ``seq:0`` up to
``seq+1:0`` of that partition's log, ``seq`` being its sequence number.
``ledger_uses`` scans every stream record (ledgers merely awaiting deletion in
a record's ``garbage`` are not uses: nothing reads them any more) so that the
commands that delete ledgers can refuse, naming what would break.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark_ledger.errors import NoSuchKeyError
from pyspark_ledger.log.log_metadata import ACTIVE
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.log.stream_store import list_stream_names, read_stream
from pyspark_ledger.metadata.store import MetadataStore


@dataclass(frozen=True, slots=True)
class LedgerUse:
    """Ledger ``ledger_id`` holds positions ``start`` up to (not including) ``end`` of a stream's partition."""

    stream: str
    partition: int
    ledger_id: int
    ledger_seq: int

    @property
    def start(self) -> LogPosition:
        return LogPosition(self.ledger_seq, 0)

    @property
    def end(self) -> LogPosition:
        return LogPosition(self.ledger_seq + 1, 0)

    def describe(self) -> str:
        return (f"stream {self.stream!r} partition {self.partition}: positions {self.start} up to {self.end} "
                f"(ledger sequence number {self.ledger_seq} of its log)")


def ledger_uses(store: MetadataStore, ledger_id: int) -> list[LedgerUse]:
    """Every place a live stream's log refers to ``ledger_id`` (normally at most one)."""
    uses = []
    for name in list_stream_names(store):
        try:
            record = read_stream(store, name).value
        except NoSuchKeyError:
            continue  # deleted while we list
        if record.state != ACTIVE:
            continue  # being deleted: its ledgers are garbage already
        for partition, part in enumerate(record.partitions):
            seq = part.seq_of(ledger_id)
            if seq is not None:
                uses.append(LedgerUse(name, partition, ledger_id, seq))
    return uses


def describe_uses(uses: list[LedgerUse]) -> str:
    return "; ".join(use.describe() for use in uses)
