"""Kill one bookie (SIGKILL) while a ledger that has it in its ensemble is being written.

An ensemble change happens only if a bookie fails while a writer still has
entries to send to it: a ledger whose entries were all acknowledged by the
ack quorum just closes. The sink writes each task's rows into a new ledger
that stays OPEN until the task ends, so the killer looks in the metadata for
OPEN ledgers of the stream created less than ``FRESH_S`` ago whose last add
confirmed is still in the first quarter of the entries a task writes (their
tasks have most of their rows still to send), and kills the bookie that is in
the current ensemble of the most of them (``choose_victim``; ties go to the
newest ledger). With 4 bookies and ensembles of 3, the 3 left still form a full
ensemble, so the writers replace the dead one and carry on.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Sequence

from pyspark_ledger.demo.stream_layout import partition_of
from pyspark_ledger.errors import LedgerError, NoSuchLedgerError
from pyspark_ledger.log.ledgers import STREAM_TAG
from pyspark_ledger.metadata.model import OPEN, LedgerMetadata

FRESH_S = 1.5


@dataclass(frozen=True)
class Victim:
    """The bookie to kill, the newest OPEN ledger it serves, and how many OPEN ledgers it serves."""

    bookie_id: str
    ledger_id: int
    partition: int | None
    open_ledgers: int


@dataclass(frozen=True)
class Kill:
    """A bookie killed by the demo."""

    bookie_index: int
    bookie_id: str
    pid: int | None
    ledger_id: int
    partition: int | None
    open_ledgers: int
    at_s: float  # seconds after the streaming query started

    def to_dict(self) -> dict:
        return asdict(self)


def fresh_ledgers(open_ledgers: Sequence[LedgerMetadata], now_ms: int,
                  fresh_s: float = FRESH_S) -> list[LedgerMetadata]:
    """The ledgers created at most ``fresh_s`` seconds before ``now_ms``."""
    return [metadata for metadata in open_ledgers if now_ms - metadata.ctime_ms <= fresh_s * 1000]


def choose_victim(candidates: Sequence[LedgerMetadata], alive: Sequence[str]) -> Victim | None:
    """The live bookie in the current ensemble of the most candidate ledgers (see the module docstring)."""
    newest_first = sorted(candidates, key=lambda metadata: metadata.ledger_id, reverse=True)
    serves: dict[str, list[LedgerMetadata]] = {}
    for metadata in newest_first:
        for bookie in metadata.current_fragment.bookies:
            if bookie in alive:
                serves.setdefault(bookie, []).append(metadata)
    if not serves:
        return None
    rank = {bookie: position for position, bookie in enumerate(alive)}
    bookie = max(serves, key=lambda b: (len(serves[b]), serves[b][0].ledger_id, -rank[b]))
    newest = serves[bookie][0]
    return Victim(bookie, newest.ledger_id, partition_of(newest), len(serves[bookie]))


class BookieKiller:
    """Finds the OPEN ledgers of ``stream`` and kills a bookie of theirs through the sandbox."""

    def __init__(self, sandbox, client, stream: str, entries_per_ledger: int) -> None:
        self._sandbox = sandbox
        self._client = client
        self._max_lac = max(entries_per_ledger // 4 - 1, 0)
        self._tag = stream.encode()
        self._done: set[int] = set()  # closed, or of another stream: never looked at again

    def open_ledgers(self) -> list[LedgerMetadata]:
        """The stream's ledgers being written now."""
        found = []
        for ledger_id in self._client.list_ledgers():
            if ledger_id in self._done:
                continue
            try:
                metadata = self._client.ledger_metadata(ledger_id)
            except NoSuchLedgerError:
                self._done.add(ledger_id)
                continue
            if metadata.custom_metadata.get(STREAM_TAG) != self._tag or metadata.state != OPEN:
                self._done.add(ledger_id)
            else:
                found.append(metadata)
        return found

    def _early(self, metadata: LedgerMetadata) -> bool:
        """True if the ledger's last add confirmed is still in the first quarter of a task's entries."""
        try:
            with self._client.open_ledger(metadata.ledger_id, b"", recovery=False) as reader:
                return reader.last_add_confirmed <= self._max_lac
        except LedgerError:
            return False  # closed or deleted meanwhile, or unreadable: not a candidate

    def kill_one(self, at_s: float) -> Kill | None:
        """Kill a bookie of a ledger that just began; None (nothing killed) if no ledger is beginning."""
        bookies = self._sandbox.bookies
        alive = [bookie.bookie_id for bookie in bookies if bookie.is_running()]
        fresh = fresh_ledgers(self.open_ledgers(), time.time_ns() // 1_000_000)
        victim = choose_victim([metadata for metadata in fresh if self._early(metadata)], alive)
        if victim is None:
            return None
        index = [bookie.bookie_id for bookie in bookies].index(victim.bookie_id)
        pid = bookies[index].pid
        self._sandbox.kill_bookie(index)
        return Kill(index, victim.bookie_id, pid, victim.ledger_id, victim.partition, victim.open_ledgers, at_s)
