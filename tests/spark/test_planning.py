"""Read planning: resolving offsets, data loss, admission control and read ranges."""
from __future__ import annotations

import itertools
import random
import re

import pytest

from pyspark_ledger.errors import DataLossError, InvalidArgumentError, InvalidConfigurationError
from pyspark_ledger.log import EARLIEST, LATEST, LogPosition as P
from pyspark_ledger.log.log_spans import LedgerSpan, PartitionLog
from pyspark_ledger.spark.offsets import StreamOffset
from pyspark_ledger.spark.planning import (ReadRange, admit, advance, check_offset, check_position, plan_ranges,
                                           resolve, resolve_offsets)


def log_of(*entry_counts: int, first_seq: int = 0, entry_bytes: int = 100, **kwargs) -> PartitionLog:
    """A log whose ledger ``first_seq + i`` holds ``entry_counts[i]`` entries (ledger id = 1000 + seq)."""
    return PartitionLog(tuple(LedgerSpan(first_seq + i, 1000 + first_seq + i, count - 1, count * entry_bytes)
                              for i, count in enumerate(entry_counts)), **kwargs)


def entries_between(start: P, end: P, log: PartitionLog) -> list[tuple[int, int]]:
    return [(r.ledger_seq, entry) for r in plan_ranges(0, start, end, log)
            for entry in range(r.first_entry_id, r.last_entry_id + 1)]


# --- the log view ----------------------------------------------------------------------------


def test_start_end_and_backlog():
    log = log_of(3, 0, 5, first_seq=4)
    assert (log.start, log.end) == (P(4, 0), P(6, 5))
    assert log.backlog(P(4, 1)) == (7, 700)
    assert log.backlog(log.end) == (0, 0)


def test_empty_log_starts_and_ends_at_the_next_ledger():
    log = PartitionLog((), next_ledger_seq=9)
    assert log.start == log.end == P(9, 0)
    assert PartitionLog(()).start == P(0, 0)


def test_spans_must_be_consecutive_and_sane():
    with pytest.raises(InvalidArgumentError, match="consecutive"):
        PartitionLog((LedgerSpan(0, 1, 4), LedgerSpan(2, 3, 4)))
    with pytest.raises(InvalidArgumentError, match="last_entry_id >= -1"):
        PartitionLog((LedgerSpan(0, 1, -2),))


def test_mean_entry_size_estimate_rounds_up():
    span = LedgerSpan(0, 1, 2, length=10)  # 3 entries, 10 bytes
    assert (span.bytes_for(1), span.bytes_for(3)) == (4, 10)
    assert LedgerSpan(0, 1, -1).bytes_for(5) == 0


# --- resolve and data loss ------------------------------------------------------------------


def test_resolve_sentinels_against_the_log():
    log = log_of(3, 4, first_seq=2)
    assert resolve(EARLIEST, log) == P(2, 0)
    assert resolve(LATEST, log) == P(3, 4)
    assert resolve(P(3, 1), log) == P(3, 1)


@pytest.mark.parametrize("position", [P(2, 0), P(2, 2), P(2, 3), P(3, 0), P(3, 4)])
def test_positions_the_log_holds_are_fine(position):
    assert check_position(0, position, log_of(3, 4, first_seq=2), fail_on_data_loss=True) is None


def test_truncated_position_fails_naming_the_option():
    log = log_of(3, 4, first_seq=2)
    with pytest.raises(DataLossError) as caught:
        check_position(1, P(1, 5), log, fail_on_data_loss=True)
    message = str(caught.value)
    assert "stream partition 1: the log was truncated and now starts at 2:0" in message
    assert "entries from 1:5 to 2:0 are lost" in message
    assert "Set the option failOnDataLoss=false to continue from 2:0" in message


def test_truncated_position_skips_ahead_when_allowed():
    loss = check_position(1, P(1, 5), log_of(3, 4, first_seq=2), fail_on_data_loss=False)
    assert (loss.partition, loss.lost_from, loss.resume_at) == (1, P(1, 5), P(2, 0))
    assert "1:5 to 2:0 are lost" in loss.message
    assert loss.message.endswith("continuing from 2:0 (failOnDataLoss=false)")


def test_position_at_the_end_of_the_truncated_ledger_lost_nothing():
    log = log_of(3, first_seq=2, truncated_end=P(1, 5))
    assert check_position(0, P(1, 5), log, fail_on_data_loss=True) is None
    assert advance(P(1, 5), log) == P(2, 3)
    assert entries_between(P(1, 5), P(2, 3), log) == [(2, 0), (2, 1), (2, 2)]
    with pytest.raises(DataLossError):
        check_position(0, P(1, 4), log, fail_on_data_loss=True)


@pytest.mark.parametrize("position, fragment, resume_at", [
    (P(5, 0), "the log ends at 3:4, before the position 5:0: was the stream deleted", P(2, 0)),
    (P(3, 5), "the log ends at 3:4, before the position 3:5", P(2, 0)),
    (P(2, 4), "ledger 2 of the log ends at entry 2, before the position 2:4", P(2, 3)),
])
def test_positions_beyond_the_log_are_data_loss_too(position, fragment, resume_at):
    log = log_of(3, 4, first_seq=2)
    with pytest.raises(DataLossError, match=re.escape(fragment)):
        check_position(0, position, log, fail_on_data_loss=True)
    loss = check_position(0, position, log, fail_on_data_loss=False)
    assert loss.resume_at == resume_at


# --- advance ----------------------------------------------------------------------------------


def test_advance_without_limits_reaches_the_end():
    log = log_of(3, 0, 2)
    assert advance(P(0, 1), log) == P(2, 2)


def test_advance_with_nothing_new_returns_the_same_position():
    log = log_of(3, 2)
    assert advance(P(1, 2), log) == P(1, 2)
    assert advance(P(1, 2), log, max_entries=5, max_bytes=10) == P(1, 2)


def test_advance_counts_entries_across_ledgers():
    log = log_of(3, 0, 4, 2)
    assert advance(P(0, 0), log, max_entries=3) == P(0, 3)
    assert advance(P(0, 0), log, max_entries=5) == P(2, 2)
    assert advance(P(0, 2), log, max_entries=1) == P(0, 3)
    assert advance(P(0, 3), log, max_entries=1) == P(2, 1)


def test_advance_by_bytes_takes_at_least_one_entry():
    log = log_of(10, entry_bytes=100)
    assert advance(P(0, 0), log, max_bytes=350) == P(0, 3)
    assert advance(P(0, 0), log, max_bytes=50) == P(0, 1)  # progress even when an entry is bigger
    assert advance(P(0, 0), log, max_entries=2, max_bytes=1000) == P(0, 2)


def test_advance_matches_a_one_entry_at_a_time_model():
    rng = random.Random(3)
    for _ in range(300):
        counts = [rng.randint(0, 6) for _ in range(rng.randint(1, 5))]
        log = log_of(*counts)
        slots = [(seq, e) for seq, count in enumerate(counts) for e in range(count)]
        start_index = rng.randint(0, len(slots))
        start = P(*slots[start_index]) if start_index < len(slots) else log.end
        limit = rng.randint(1, 8)
        expected = slots[start_index:start_index + limit]
        end = advance(start, log, max_entries=limit)
        assert entries_between(start, end, log) == expected
        assert (end == start) == (not expected)


# --- admission over partitions -----------------------------------------------------------------


def test_admit_without_limits_takes_every_backlog():
    logs = {0: log_of(5), 1: log_of(2, 3)}
    start = StreamOffset.of({0: P(0, 1), 1: P(0, 0)})
    assert admit(start, logs) == StreamOffset.of({0: P(0, 5), 1: P(1, 3)})


def test_admit_shares_the_entry_budget_by_backlog():
    logs = {0: log_of(90), 1: log_of(10), 2: log_of(0)}
    start = StreamOffset.of({0: P(0, 0), 1: P(0, 0), 2: P(0, 0)})
    end = admit(start, logs, max_entries=20)
    assert end == StreamOffset.of({0: P(0, 18), 1: P(0, 2), 2: P(0, 0)})


def test_admit_never_exceeds_the_entry_budget_and_always_progresses():
    rng = random.Random(8)
    for _ in range(200):
        logs = {p: log_of(*[rng.randint(0, 9) for _ in range(rng.randint(1, 3))])
                for p in range(rng.randint(1, 4))}
        start = StreamOffset.of({p: log.start for p, log in logs.items()})
        budget = rng.randint(1, 30)
        end = admit(start, logs, max_entries=budget)
        taken = sum(len(entries_between(start[p], end[p], logs[p])) for p in logs)
        available = sum(logs[p].backlog(start[p])[0] for p in logs)
        assert taken == min(budget, available)


def test_admit_by_bytes():
    logs = {0: log_of(100, entry_bytes=1000), 1: log_of(100, entry_bytes=1000)}
    start = StreamOffset.of({0: P(0, 0), 1: P(0, 0)})
    assert admit(start, logs, max_bytes=10_000) == StreamOffset.of({0: P(0, 5), 1: P(0, 5)})
    tiny = admit(start, logs, max_bytes=10)
    assert sum(tiny[p].entry_id for p in (0, 1)) >= 1  # still progresses


def test_admit_never_exceeds_the_byte_budget_unless_one_entry_is_bigger():
    rng = random.Random(11)
    for _ in range(300):
        entry_bytes = {p: rng.choice((50, 100)) for p in range(rng.randint(1, 5))}
        logs = {p: log_of(*[rng.randint(0, 6) for _ in range(rng.randint(1, 3))], entry_bytes=size)
                for p, size in entry_bytes.items()}
        start = StreamOffset.of({p: log.start for p, log in logs.items()})
        budget = rng.randint(1, 1200)
        end = admit(start, logs, max_bytes=budget)
        taken = [(p, len(entries_between(start[p], end[p], logs[p]))) for p in logs]
        size = sum(count * entry_bytes[p] for p, count in taken)
        available = sum(logs[p].backlog(start[p])[0] for p in logs)
        entries = sum(count for _, count in taken)
        assert size <= budget or entries == 1
        assert (entries > 0) == (available > 0)


def test_admit_without_new_data_returns_the_start():
    logs = {0: log_of(3)}
    start = StreamOffset.of({0: P(0, 3)})
    assert admit(start, logs, max_entries=10).to_json() == start.to_json()


# --- read ranges ---------------------------------------------------------------------------------


def test_plan_ranges_per_ledger_with_ids():
    log = log_of(4, 0, 3, first_seq=5)
    ranges = plan_ranges(2, P(5, 1), P(7, 2), log)
    assert ranges == [ReadRange(2, 5, 1005, 1, 3), ReadRange(2, 7, 1007, 0, 1)]
    assert [r.entry_count for r in ranges] == [3, 2]


def test_plan_ranges_chunks_large_ledgers():
    log = log_of(10)
    ranges = plan_ranges(0, P(0, 0), P(0, 10), log, max_entries_per_range=4)
    assert [(r.first_entry_id, r.last_entry_id) for r in ranges] == [(0, 2), (3, 5), (6, 9)]
    with pytest.raises(InvalidArgumentError, match="max_entries_per_range"):
        plan_ranges(0, P(0, 0), P(0, 10), log, max_entries_per_range=0)


@pytest.mark.parametrize("entries, most, sizes", [(12, 4, [4, 4, 4]), (9, 4, [3, 3, 3]), (13, 4, [3, 3, 3, 4]),
                                                  (1200, 512, [400, 400, 400]), (5, 8, [5])])
def test_plan_ranges_cuts_a_ledger_into_the_fewest_even_chunks(entries, most, sizes):
    ranges = plan_ranges(0, P(0, 0), P(0, entries), log_of(entries), max_entries_per_range=most)
    assert [r.entry_count for r in ranges] == sizes
    assert ranges[0].first_entry_id == 0 and ranges[-1].last_entry_id == entries - 1
    assert all(a.last_entry_id + 1 == b.first_entry_id for a, b in zip(ranges, ranges[1:]))


def test_plan_ranges_empty_between_equal_positions():
    log = log_of(3, 3)
    assert plan_ranges(0, P(1, 1), P(1, 1), log) == []
    assert plan_ranges(0, log.end, log.end, log) == []


def test_consecutive_batches_cover_every_entry_exactly_once():
    log = log_of(3, 0, 7, 1, 5)
    slots = [(seq, e) for seq, count in enumerate((3, 0, 7, 1, 5)) for e in range(count)]
    for limit in (1, 2, 3, 5, 100):
        position, seen = log.start, []
        for _ in itertools.count():
            end = advance(position, log, max_entries=limit)
            if end == position:
                break
            seen += entries_between(position, end, log)
            position = end
        assert seen == slots and position == log.end


# --- whole offsets ----------------------------------------------------------------------------------


def test_resolve_offsets_per_partition():
    from pyspark_ledger.spark.offsets import parse_starting_offsets

    logs = {0: log_of(3, first_seq=2), 1: log_of(5), 2: log_of(1, 1)}
    spec = parse_starting_offsets('{"1": "0:2", "2": "latest"}', streaming=True)
    assert resolve_offsets(spec, logs) == StreamOffset.of({0: P(2, 0), 1: P(0, 2), 2: P(1, 1)})
    with pytest.raises(InvalidConfigurationError, match=r"names partition\(s\) \[5\]"):
        resolve_offsets(parse_starting_offsets('{"5": "0:0"}', streaming=True), logs)


def test_check_offset_adds_new_partitions_and_handles_loss():
    logs = {0: log_of(3, first_seq=2), 1: log_of(5), 2: log_of(4)}
    checkpointed = StreamOffset.of({0: P(1, 9), 1: P(0, 3)})
    with pytest.raises(DataLossError, match="stream partition 0"):
        check_offset(checkpointed, logs, fail_on_data_loss=True)
    offset, losses = check_offset(checkpointed, logs, fail_on_data_loss=False)
    assert offset == StreamOffset.of({0: P(2, 0), 1: P(0, 3), 2: P(0, 0)})
    assert [(loss.partition, loss.lost_from) for loss in losses] == [(0, P(1, 9))]
    assert check_offset(offset, logs, fail_on_data_loss=True) == (offset, [])
