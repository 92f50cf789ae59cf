"""In-memory bookies, a versioned metadata cell and drivers for the protocol state machines.

Fakes for scripting exact interleavings: entries are encoded and verified with
the real ``EntryCodec``. Requests reach a bookie when an action is executed;
answers are queued and delivered one by one, so a test can reorder them,
hold some back (a hanging bookie) or lose requests (a lost fence message).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from pyspark_ledger.entry import EntryCodec, peek_header
from pyspark_ledger.errors import MetadataVersionConflictError, NotEnoughBookiesError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.protocol.add_tracker import AddTracker
from pyspark_ledger.protocol.answers import LacAnswer, ReadAnswer
from pyspark_ledger.protocol.ledger_rules import Decision, resolve_recovery_close_conflict
from pyspark_ledger.protocol.placement import replace_bookies
from pyspark_ledger.protocol.recovery import (
    ChooseReplacements, CloseLedger, FenceAndReadLac, LedgerRecovery, ReadEntry, RecoveryFailed, WriteBack,
)

LEDGER = 7
CODEC = EntryCodec("crc32c", b"pw")


@dataclass
class SimBookie:
    bookie_id: str
    entries: dict[int, bytes] = field(default_factory=dict)
    fenced: bool = False
    known: bool = False  # has the ledger (created by an add or a fence)
    down: bool = False

    def add(self, entry_id: int, body: bytes, recovery: bool = False) -> str:
        if self.down:
            return "UNAVAILABLE"
        if self.fenced and not recovery:
            return "FENCED"
        self.entries[entry_id] = body
        self.known = True
        return "OK"

    def lac(self) -> int:
        return max((peek_header(b).last_add_confirmed for b in self.entries.values()), default=-1)

    def fence_read_lac(self) -> LacAnswer:
        if self.down:
            return LacAnswer.unknown("timeout")
        known, self.fenced, self.known = self.known, True, True
        return LacAnswer.ok(self.lac()) if known else LacAnswer.no_such_ledger()

    def read(self, entry_id: int, fence: bool) -> ReadAnswer:
        if self.down:
            return ReadAnswer.unknown("timeout")
        known = self.known
        if fence:
            self.fenced = self.known = True
        if entry_id not in self.entries:
            return ReadAnswer.no_such_entry() if known else ReadAnswer.no_such_ledger()
        decoded = CODEC.decode(self.entries[entry_id], LEDGER, entry_id)
        return ReadAnswer.present(self.entries[entry_id], decoded.length)


class SimCluster:
    def __init__(self, names: list[str]) -> None:
        self.bookies = {name: SimBookie(name) for name in names}

    def __getitem__(self, name: str) -> SimBookie:
        return self.bookies[name]

    def holders(self, entry_id: int) -> set[str]:
        return {name for name, b in self.bookies.items() if entry_id in b.entries}


class SimMetadata:
    """One versioned metadata value with compare-and-set."""

    def __init__(self, md: LedgerMetadata) -> None:
        self.value, self.version = md, 0

    def read(self) -> tuple[LedgerMetadata, int]:
        return self.value, self.version

    def cas(self, md: LedgerMetadata, expected: int) -> int:
        if expected != self.version:
            raise MetadataVersionConflictError(f"expected version {expected}, stored {self.version}")
        self.value, self.version = md, self.version + 1
        return self.version


class SimWriter:
    """A writer over an AddTracker: encodes entries, sends them, feeds acks back."""

    def __init__(self, cluster: SimCluster, md: LedgerMetadata) -> None:
        self.cluster = cluster
        self.tracker = AddTracker(md.current_fragment.bookies, md.write_quorum, md.ack_quorum)
        self.bodies: dict[int, bytes] = {}
        self.confirmed: list[int] = []
        self.fenced = False

    def add(self, payload: bytes) -> tuple[int, tuple[str, ...]]:
        plan = self.tracker.add(len(payload))
        self.bodies[plan.entry_id] = CODEC.encode(LEDGER, plan.entry_id, plan.last_add_confirmed,
                                                  plan.length, payload)
        return plan.entry_id, plan.targets

    def send(self, entry_id: int, bookie: str) -> None:
        status = self.cluster[bookie].add(entry_id, self.bodies[entry_id])
        if status == "OK":
            self.confirmed += [c.entry_id for c in self.tracker.ack(entry_id, bookie)]
        elif status == "FENCED":
            self.fenced = True
            self.tracker.stop("ledger fenced")
        else:
            self.tracker.failed(bookie)

    def write(self, payload: bytes) -> int:
        entry_id, targets = self.add(payload)
        for bookie in targets:
            self.send(entry_id, bookie)
        return entry_id


Pick = Callable[[list], int]


class RecoveryDriver:
    """Runs a LedgerRecovery against a SimCluster and a SimMetadata."""

    def __init__(self, recovery: LedgerRecovery, cluster: SimCluster, meta: SimMetadata, version: int,
                 *, spares: tuple[str, ...] = (), hang: set[tuple[str, str, int]] | None = None,
                 write_fail: set[str] | None = None, pick: Pick | None = None, seed: int = 1,
                 flaky: float = 0.0) -> None:
        self.recovery, self.cluster, self.meta, self.version = recovery, cluster, meta, version
        self.spares = list(spares)
        self.hang = hang or set()  # (bookie, "lac" | "read" | "add", entry_id or -1)
        self.write_fail = write_fail or set()
        self.pick = pick or (lambda queue: 0)
        self.rng = random.Random(seed)
        self.flaky = flaky  # chance that an answer is lost after the request reached the bookie
        self.queue: list[tuple[str, Callable[[], tuple]]] = []
        self.delivered: list[str] = []
        self.actions: list = []
        self.outcome: CloseLedger | RecoveryFailed | None = None
        self.closed: LedgerMetadata | None = None

    def run(self) -> LedgerMetadata | None:
        """Deliver until recovery ends or nothing is left to deliver (it waits)."""
        self._handle(self.recovery.start())
        while self.queue and self.outcome is None:
            tag, deliver = self.queue.pop(self.pick(self.queue))
            self.delivered.append(tag)
            self._handle(deliver())
        return self.closed

    def _handle(self, actions: tuple) -> None:
        for action in actions:
            self.actions.append(action)
            getattr(self, "_do_" + type(action).__name__)(action)

    def _queue(self, tag: str, deliver: Callable[[], tuple]) -> None:
        self.queue.append((tag, deliver))

    def _do_FenceAndReadLac(self, action: FenceAndReadLac) -> None:
        for name in action.targets:
            if (name, "lac", -1) not in self.hang:
                answer = self.cluster[name].fence_read_lac()
                self._queue(f"lac {name}", lambda n=name, a=answer: self.recovery.on_lac_answer(n, a))

    def _do_ReadEntry(self, action: ReadEntry) -> None:
        for name in action.targets:
            if (name, "read", action.entry_id) not in self.hang:
                answer = self.cluster[name].read(action.entry_id, action.fence)
                if self.rng.random() < self.flaky:
                    answer = ReadAnswer.unknown("answer lost")
                self._queue(f"read {action.entry_id} {name} {answer.kind.value} {action.fence}",
                            lambda n=name, a=answer, e=action.entry_id: self.recovery.on_read_answer(e, n, a))

    def _do_WriteBack(self, action: WriteBack) -> None:
        for name in action.targets:
            if (name, "add", action.entry_id) in self.hang:
                continue
            ok = name not in self.write_fail and self.cluster[name].add(action.entry_id, action.body, True) == "OK"
            ok = ok and self.rng.random() >= self.flaky
            callback = self.recovery.on_write_back_ack if ok else self.recovery.on_write_back_failure
            self._queue(f"add {action.entry_id} {name}", lambda c=callback, n=name, e=action.entry_id: c(e, n))

    def _do_ChooseReplacements(self, action: ChooseReplacements) -> None:
        try:
            exclude = set(action.exclude) | self.write_fail
            chosen = replace_bookies(action.ensemble, action.failed, self.spares, exclude, self.rng)
        except NotEnoughBookiesError as exc:
            self._handle(self.recovery.on_replacement_failure(str(exc)))
            return
        for bookie in chosen.values():
            self.spares.remove(bookie)
        self._handle(self.recovery.on_replacements(chosen))

    def _do_CloseLedger(self, action: CloseLedger) -> None:
        self.outcome = action
        try:
            self.meta.cas(action.metadata, self.version)
            self.closed = action.metadata
        except MetadataVersionConflictError:
            resolution = resolve_recovery_close_conflict(self.meta.read()[0])
            assert resolution.decision is Decision.SUCCESS, resolution.reason
            self.closed = resolution.metadata

    def _do_RecoveryFailed(self, action: RecoveryFailed) -> None:
        self.outcome = action


def store_entries(cluster: SimCluster, holders: list[set[str]], lacs: list[int], size: int = 10) -> None:
    """Put entry i (payload of ``size`` bytes, header LAC ``lacs[i]``) on ``holders[i]``."""
    for entry_id, (names, lac) in enumerate(zip(holders, lacs)):
        body = CODEC.encode(LEDGER, entry_id, lac, size * (entry_id + 1), bytes([entry_id % 256]) * size)
        for name in names:
            cluster[name].add(entry_id, body)


def start_recovery(cluster: SimCluster, md: LedgerMetadata, meta: SimMetadata | None = None, window: int = 1,
                   **driver_options) -> RecoveryDriver:
    """Mark the ledger IN_RECOVERY through CAS (as the I/O layer will) and build a driver reading forward
    ``window`` entries at once."""
    from pyspark_ledger.protocol.ledger_rules import mark_in_recovery

    meta = meta or SimMetadata(md)
    stored, version = meta.read()
    mark = mark_in_recovery(stored)
    if mark.decision is Decision.WRITE:
        version = meta.cas(mark.metadata, version)
    return RecoveryDriver(LedgerRecovery(mark.metadata, window), cluster, meta, version, **driver_options)
