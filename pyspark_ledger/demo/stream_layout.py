"""What the demo's stream holds, read from the metadata: ledgers, fragments and ensemble changes.

A ledger's metadata lists its fragments: ``(first entry id, ensemble)``. A
ledger with more than one fragment had its ensemble changed while it was
written: from the new fragment's first entry on, the bookies that left the
ensemble were replaced by the ones that joined it. ``ensemble_changes`` reads
that off one ledger's metadata (pure). A change made before the ledger's
first entry was confirmed leaves no second fragment: the writer rewrites the
fragment in place (its first entry stays 0). The metadata alone cannot show
that, so ``rewritten_fragment`` compares a fragment as someone saw it earlier
(the demo's killer, at the kill) with the stored one. ``inspect_stream`` gathers it for every
ledger the stream's partition logs hold, and counts the ledgers tagged with
the stream that no log holds (written by task attempts that failed or were
aborted, and not part of the stream).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable

from pyspark_ledger.errors import NoSuchLedgerError
from pyspark_ledger.log.ledgers import PARTITION_TAG, STREAM_TAG
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.protocol.rereplication import plan_repairs


@dataclass(frozen=True)
class EnsembleChange:
    """Ledger ``ledger_id`` replaced ``replaced`` by ``replacements`` from entry ``first_entry_id`` on."""

    ledger_id: int
    partition: int | None
    first_entry_id: int
    replaced: tuple[str, ...]
    replacements: tuple[str, ...]
    ensemble_before: tuple[str, ...]
    ensemble_after: tuple[str, ...]

    in_place: bool = False  # the fragment was rewritten (no entry of it confirmed yet), not followed by a new one

    def describe(self, bookie_names: dict[str, str] | None = None) -> str:
        names = bookie_names or {}
        old = ", ".join(names.get(bookie, bookie) for bookie in self.replaced)
        new = ", ".join(names.get(bookie, bookie) for bookie in self.replacements)
        where = f"ledger {self.ledger_id}" + ("" if self.partition is None else f" (partition {self.partition})")
        how = " (before any entry of it was confirmed: the fragment was rewritten in place)" if self.in_place else ""
        return f"{where}: {old} -> {new} from entry {self.first_entry_id}{how}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StreamLayout:
    """The stream's committed ledgers as the metadata describes them."""

    stream: str
    partitions: int
    ledgers: int
    fragments: int
    entries: int
    bytes: int
    changes: tuple[EnsembleChange, ...] = field(default_factory=tuple)
    orphan_ledgers: int = 0
    #: Ledgers with a sealed fragment that still names a lost (killed) bookie: one copy short there.
    underreplicated: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return dict(asdict(self), changes=[change.to_dict() for change in self.changes])


def partition_of(metadata: LedgerMetadata) -> int | None:
    """The stream partition a ledger was created for (its tag), or None if untagged."""
    raw = metadata.custom_metadata.get(PARTITION_TAG)
    try:
        return int(raw.decode()) if raw is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def ensemble_changes(metadata: LedgerMetadata) -> list[EnsembleChange]:
    """Every ensemble change of one ledger, in entry order (empty for a single-fragment ledger)."""
    changes = []
    partition = partition_of(metadata)
    for before, after in zip(metadata.fragments, metadata.fragments[1:]):
        old, new = before.bookies, after.bookies
        changes.append(EnsembleChange(
            ledger_id=metadata.ledger_id, partition=partition, first_entry_id=after.first_entry_id,
            replaced=tuple(bookie for bookie in old if bookie not in new),
            replacements=tuple(bookie for bookie in new if bookie not in old),
            ensemble_before=tuple(old), ensemble_after=tuple(new)))
    return changes


def rewritten_fragment(metadata: LedgerMetadata, first_entry_id: int,
                       seen: tuple[str, ...]) -> EnsembleChange | None:
    """The change that rewrote, in place, the fragment from ``first_entry_id`` that was seen with the
    ensemble ``seen``; None if the stored fragment from that entry still has it (or there is none)."""
    stored = [fragment for fragment in metadata.fragments if fragment.first_entry_id == first_entry_id]
    if not stored or tuple(stored[0].bookies) == tuple(seen):
        return None
    new = tuple(stored[0].bookies)
    return EnsembleChange(
        ledger_id=metadata.ledger_id, partition=partition_of(metadata), first_entry_id=first_entry_id,
        replaced=tuple(bookie for bookie in seen if bookie not in new),
        replacements=tuple(bookie for bookie in new if bookie not in seen),
        ensemble_before=tuple(seen), ensemble_after=new, in_place=True)


def summarize_ledgers(stream: str, partitions: int, metadatas: list[LedgerMetadata],
                      orphan_ledgers: int = 0, lost: Iterable[str] = (),
                      seen: Iterable[tuple[int, int, tuple[str, ...]]] = ()) -> StreamLayout:
    """The layout of a stream from its committed ledgers' metadata (pure); ``lost``: bookies gone; ``seen``:
    fragments as seen earlier, ``(ledger id, first entry id, ensemble)``, to find changes made in place."""
    lost = set(lost)
    by_id = {metadata.ledger_id: metadata for metadata in metadatas}
    rewritten = [rewritten_fragment(by_id[ledger_id], first, ensemble)
                 for ledger_id, first, ensemble in seen if ledger_id in by_id]
    changes = sorted([change for metadata in metadatas for change in ensemble_changes(metadata)]
                     + [change for change in rewritten if change is not None],
                     key=lambda change: (change.ledger_id, change.first_entry_id))
    return StreamLayout(
        stream=stream, partitions=partitions, ledgers=len(metadatas),
        fragments=sum(len(metadata.fragments) for metadata in metadatas),
        entries=sum(metadata.last_entry_id + 1 for metadata in metadatas),
        bytes=sum(metadata.length for metadata in metadatas),
        changes=tuple(changes), orphan_ledgers=orphan_ledgers,
        underreplicated=tuple(md.ledger_id for md in metadatas if lost and plan_repairs(md, lost).repairs))


def inspect_stream(streams, stream: str, lost: Iterable[str] = (),
                   seen: Iterable[tuple[int, int, tuple[str, ...]]] = ()) -> StreamLayout:
    """Read the layout of ``stream`` through a ``StreamClient`` (``lost``: bookies known to be gone; ``seen``:
    as ``summarize_ledgers``)."""
    client = streams.client
    logs = streams.partition_logs(stream)
    committed = [span.ledger_id for _, log in sorted(logs.items()) for span in log.spans]
    metadatas = [client.ledger_metadata(ledger_id) for ledger_id in committed]
    return summarize_ledgers(stream, len(logs), metadatas, count_orphans(client, stream, set(committed)), lost,
                             seen)


def count_orphans(client, stream: str, committed: set[int]) -> int:
    """Ledgers tagged with ``stream`` that no partition log holds."""
    orphans = 0
    for ledger_id in client.list_ledgers():
        if ledger_id in committed:
            continue
        try:
            tag = client.ledger_metadata(ledger_id).custom_metadata.get(STREAM_TAG)
        except NoSuchLedgerError:
            continue  # deleted meanwhile
        orphans += tag == stream.encode()
    return orphans
