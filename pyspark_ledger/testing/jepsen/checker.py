"""The checker of a Jepsen-style run: pure code over a history and what was read back after healing.

Input: the ``History`` of every client operation, and per ledger a ``LedgerOutcome`` -- its metadata
after healing and recovery, every metadata version seen while it changed, and what each reader read
(``(entry_id, digest)`` in order, or the error text when the read failed). The checks, each citing the
invariant of docs/protocol.md it verifies:

- ``acknowledged-readable`` (I1): every acknowledged add at or below its ledger's end reads back, from
  every reader, at its entry id with its bytes (digest).
- ``nothing-past-end`` (I2): no add was acknowledged past the end its ledger was closed (or recovered) at.
- ``readers-agree`` (I3): every reader of a closed ledger read the same entries, exactly its entries
  0 .. last entry.
- ``entries-in-order`` (I3, W1): a writer's acknowledgements of one ledger come in entry order, and the
  log holds only payloads that were added to that ledger, in the order they were added.
- ``fragments-valid`` (I4, M3): each stored version is a valid successor of the one before, first
  entries start at 0 and increase, every ensemble has E distinct bookies.
- ``ledgers-closed`` (I5): once faults heal, every ledger that was created is CLOSED and readable.
- ``exactly-once`` (S1, a hook for the Spark job): every expected output key appears exactly once.

``check`` returns a ``Result``: the failures and the figures of the run (acknowledged, lost, divergent).
``Result.report(seed, replay)`` prints the seed, the replay command and a minimal history: only the
events of the ledgers (and entries) that failed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from pyspark_ledger.errors import LedgerError
from pyspark_ledger.metadata.model import CLOSED, LedgerMetadata
from pyspark_ledger.protocol.ledger_rules import check_transition
from pyspark_ledger.testing.jepsen.history import INVOKE, OK, Event, History

ACKED = "acknowledged-readable"
PAST_END = "nothing-past-end"
AGREE = "readers-agree"
ORDER = "entries-in-order"
FRAGMENTS = "fragments-valid"
CLOSED_CHECK = "ledgers-closed"
EXACTLY_ONCE = "exactly-once"
CHECKS = (ACKED, PAST_END, AGREE, ORDER, FRAGMENTS, CLOSED_CHECK)
RULES = {ACKED: "I1", PAST_END: "I2", AGREE: "I3", ORDER: "I3", FRAGMENTS: "I4", CLOSED_CHECK: "I5",
         EXACTLY_ONCE: "S1"}
MAX_FAILURES = 50          # per check: one broken ledger must not flood the report
MAX_REPORT_EVENTS = 200    # lines of minimal history printed per failure report

Reads = Sequence[tuple[int, str]] | str


@dataclass(frozen=True)
class LedgerOutcome:
    """A ledger after healing: final metadata (None: missing), the versions seen, and each reader's read."""

    ledger_id: int
    final: LedgerMetadata | None
    versions: tuple[LedgerMetadata, ...] = ()
    reads: Mapping[str, Reads] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    check: str
    ledger_id: int | None
    entry_id: int | None
    message: str

    def __str__(self) -> str:
        where = "" if self.ledger_id is None else f" ledger {self.ledger_id}"
        where += "" if self.entry_id is None else f" entry {self.entry_id}"
        return f"[{self.check}, docs/protocol.md {RULES[self.check]}]{where}: {self.message}"


@dataclass
class Result:
    failures: list[Failure]
    acknowledged: int
    lost: int
    divergent: int
    ledgers: int
    history: History | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def failed_checks(self) -> set[str]:
        return {failure.check for failure in self.failures}

    def figures(self) -> dict[str, int]:
        return {"acknowledged": self.acknowledged, "lost": self.lost, "divergent": self.divergent,
                "ledgers": self.ledgers, "failures": len(self.failures)}

    def report(self, seed: int | None = None, replay: str = "") -> str:
        """The seed, the replay command, the failures, and the minimal history that shows them."""
        lines = []
        if seed is not None:
            lines.append(f"seed {seed}" + (f"; replay: {replay}" if replay else ""))
        lines += [str(failure) for failure in self.failures]
        if self.history is not None and self.failures:
            events = minimal_history(self.history, self.failures)
            lines.append(f"minimal history ({len(events)} events of the failing ledgers):")
            lines += [event.line() for event in events[:MAX_REPORT_EVENTS]]
            if len(events) > MAX_REPORT_EVENTS:
                lines.append(f"... {len(events) - MAX_REPORT_EVENTS} more")
        return "\n".join(lines)


def minimal_history(history: Iterable[Event], failures: Sequence[Failure]) -> list[Event]:
    """The events that involve a failing ledger: its create, close and recover, and of its adds only those of
    the failing entries (all of them when a failure names no entry), with their invocations."""
    wanted_ledgers = {failure.ledger_id for failure in failures if failure.ledger_id is not None}
    whole = {failure.ledger_id for failure in failures if failure.entry_id is None}
    entries = {(failure.ledger_id, failure.entry_id) for failure in failures if failure.entry_id is not None}
    events = list(history)
    keep_ops = set()
    for event in events:
        if event.ledger_id not in wanted_ledgers:
            continue
        if event.action != "add" or event.ledger_id in whole or (event.ledger_id, event.entry_id) in entries:
            keep_ops.add(event.op_id)
    return [event for event in events if event.op_id in keep_ops]


def check(history: History, outcomes: Mapping[int, LedgerOutcome], *, expected_ledgers: Iterable[int] = ()) -> Result:
    """Run every check; see the module docstring."""
    events = list(history)
    acked = [event for event in events if event.action == "add" and event.kind == OK]
    created = {event.ledger_id for event in events if event.action == "create" and event.kind == OK}
    created |= set(expected_ledgers)
    failures: list[Failure] = []
    for name, fn in ((ACKED, _acknowledged_readable), (PAST_END, _nothing_past_end), (AGREE, _readers_agree),
                     (ORDER, _entries_in_order), (FRAGMENTS, _fragments_valid), (CLOSED_CHECK, _ledgers_closed)):
        found = list(fn(events, acked, created, outcomes))
        failures += found[:MAX_FAILURES]
    lost = {(f.ledger_id, f.entry_id) for f in failures if f.check == ACKED}
    divergent = {(f.ledger_id, f.entry_id) for f in failures if f.check == PAST_END}
    divergent |= {(f.ledger_id, None) for f in failures if f.check == AGREE}
    return Result(failures, len(acked), len(lost), len(divergent), len(created | set(outcomes)), history)


# --- the checks -------------------------------------------------------------------

def _acknowledged_readable(events, acked, created, outcomes):
    for event in acked:
        outcome = outcomes.get(event.ledger_id)
        if outcome is None or outcome.final is None:
            yield Failure(ACKED, event.ledger_id, event.entry_id, "acknowledged, but its ledger is gone")
            continue
        if event.entry_id > outcome.final.last_entry_id:
            continue  # nothing-past-end reports it
        for reader, read in sorted(outcome.reads.items()):
            if isinstance(read, str):
                yield Failure(ACKED, event.ledger_id, event.entry_id, f"acknowledged, but {reader} could not read "
                              f"the ledger: {read}")
                continue
            found = dict(read).get(event.entry_id)
            if found != event.digest:
                what = "missing" if found is None else f"read as {found}"
                yield Failure(ACKED, event.ledger_id, event.entry_id,
                              f"acknowledged with payload {event.digest}, {what} by {reader}")


def _nothing_past_end(events, acked, created, outcomes):
    for event in acked:
        outcome = outcomes.get(event.ledger_id)
        if outcome is not None and outcome.final is not None and outcome.final.state == CLOSED \
                and event.entry_id > outcome.final.last_entry_id:
            yield Failure(PAST_END, event.ledger_id, event.entry_id,
                          f"acknowledged by {event.process}, but the ledger was closed at entry "
                          f"{outcome.final.last_entry_id}")


def _readers_agree(events, acked, created, outcomes):
    for ledger_id, outcome in sorted(outcomes.items()):
        if outcome.final is None or outcome.final.state != CLOSED:
            continue
        expected = list(range(outcome.final.last_entry_id + 1))
        seen = {reader: list(read) for reader, read in outcome.reads.items() if not isinstance(read, str)}
        for reader, read in sorted(seen.items()):
            ids = [entry_id for entry_id, _ in read]
            if ids != expected:
                yield Failure(AGREE, ledger_id, None, f"{reader} read entries {_span(ids)}, the ledger is closed at "
                              f"{outcome.final.last_entry_id}")
        distinct = {tuple(read) for read in seen.values()}
        if len(distinct) > 1:
            first = _first_difference(list(seen.values()))
            yield Failure(AGREE, ledger_id, first, f"{len(seen)} readers read {len(distinct)} different sequences")


def _entries_in_order(events, acked, created, outcomes):
    last: dict[tuple[str, int], Event] = {}
    for event in sorted(acked, key=lambda e: e.time):
        key = (event.process, event.ledger_id)
        before = last.get(key)
        if before is not None and event.entry_id <= before.entry_id:
            yield Failure(ORDER, event.ledger_id, event.entry_id,
                          f"{event.process} had entry {before.entry_id} acknowledged before entry {event.entry_id}")
        last[key] = event
    invoked: dict[int, dict[str, float]] = {}
    for event in events:
        if event.action == "add" and event.kind == INVOKE and event.digest is not None:
            invoked.setdefault(event.ledger_id, {}).setdefault(event.digest, event.time)
    for ledger_id, outcome in sorted(outcomes.items()):
        reads = [read for read in outcome.reads.values() if not isinstance(read, str)]
        if not reads:
            continue
        times = invoked.get(ledger_id, {})
        previous = None
        for entry_id, payload in reads[0]:
            at = times.get(payload)
            if at is None:
                yield Failure(ORDER, ledger_id, entry_id, f"holds payload {payload}, which no add to it carried")
                continue
            if previous is not None and at < previous:
                yield Failure(ORDER, ledger_id, entry_id, "holds a payload added before the one of the entry before it")
            previous = at


def _fragments_valid(events, acked, created, outcomes):
    for ledger_id, outcome in sorted(outcomes.items()):
        versions = list(outcome.versions) + ([outcome.final] if outcome.final is not None else [])
        for before, after in zip(versions, versions[1:]):
            if before == after:
                continue
            try:
                check_transition(before, after)
            except LedgerError as exc:
                yield Failure(FRAGMENTS, ledger_id, None, f"an invalid metadata change: {exc}")
        for md in versions:
            problem = _malformed(md)
            if problem:
                yield Failure(FRAGMENTS, ledger_id, None, problem)
                break


def _malformed(md: LedgerMetadata) -> str:
    firsts = [fragment.first_entry_id for fragment in md.fragments]
    if not firsts or firsts[0] != 0:
        return f"the first fragment starts at {firsts[:1]}, not 0"
    if any(later <= earlier for earlier, later in zip(firsts, firsts[1:])):
        return f"fragment first entries do not increase: {firsts}"
    for fragment in md.fragments:
        if len(fragment.bookies) != md.ensemble_size or len(set(fragment.bookies)) != len(fragment.bookies):
            return (f"the fragment at entry {fragment.first_entry_id} names {list(fragment.bookies)}, not "
                    f"{md.ensemble_size} distinct bookies")
    return ""


def _ledgers_closed(events, acked, created, outcomes):
    for ledger_id in sorted(created | set(outcomes)):
        outcome = outcomes.get(ledger_id)
        if outcome is None or outcome.final is None:
            yield Failure(CLOSED_CHECK, ledger_id, None, "created, but its metadata is gone")
        elif outcome.final.state != CLOSED:
            yield Failure(CLOSED_CHECK, ledger_id, None, f"still {outcome.final.state} after the faults healed")
        else:
            for reader, read in sorted(outcome.reads.items()):
                if isinstance(read, str):
                    yield Failure(CLOSED_CHECK, ledger_id, None, f"{reader} could not read it: {read}")


def check_exactly_once(expected: Iterable[str], output: Iterable[str]) -> list[Failure]:
    """The Spark hook (S1): every expected key appears exactly once in the output, and nothing else does."""
    want, got = Counter(expected), Counter(output)
    failures = []
    for key in sorted(want | got):
        if got[key] != want[key]:
            failures.append(Failure(EXACTLY_ONCE, None, None,
                                    f"key {key!r} expected {want[key]} time(s), written {got[key]} time(s)"))
    return failures[:MAX_FAILURES]


def _span(ids: list[int]) -> str:
    if not ids:
        return "none"
    if ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}..{ids[-1]}"
    return str(ids[:10]) + ("..." if len(ids) > 10 else "")


def _first_difference(reads: list[list[tuple[int, str]]]) -> int | None:
    for index in range(max(len(read) for read in reads)):
        column = {read[index] if index < len(read) else None for read in reads}
        if len(column) > 1:
            return index
    return None
