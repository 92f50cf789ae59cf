"""The reader rules (pyspark_ledger.protocol.read_rules): readable end, range batches, LAC advance
and when a replica is slow (docs/protocol.md L3, L4, L7)."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidArgumentError, NoSuchEntryError
from pyspark_ledger.metadata.model import CLOSED, Fragment, LedgerMetadata
from pyspark_ledger.protocol.read_rules import (advance_lac, check_read_range, fragment_last_entry, lac_floor,
                                                plan_batches, readable_last_entry, slow_after)


def metadata(*firsts: int, state: str = "OPEN", last: int = -1) -> LedgerMetadata:
    fragments = tuple(Fragment(first, (f"a{first}", f"b{first}", f"c{first}")) for first in firsts)
    return LedgerMetadata(7, 3, 3, 2, fragments, state=state, last_entry_id=last)


def test_readable_end_of_open_ledger_is_its_lac_but_not_below_current_fragment():
    md = metadata(0, 10, 20)
    assert lac_floor(md) == 19
    assert readable_last_entry(md, -1) == 19  # R8: the current ensemble knows nothing yet
    assert readable_last_entry(md, 25) == 25


def test_readable_end_of_closed_ledger_is_its_last_entry():
    assert readable_last_entry(metadata(0, 10, state=CLOSED, last=8), 3) == 8
    assert readable_last_entry(metadata(0, state=CLOSED, last=-1), -1) == -1


def test_read_range_checks():
    check_read_range(7, 0, 5, 5)
    with pytest.raises(NoSuchEntryError, match="beyond the readable end 5"):
        check_read_range(7, 0, 6, 5)
    for first, last in ((-1, 3), (4, 3)):
        with pytest.raises(InvalidArgumentError):
            check_read_range(7, first, last, 10)
    with pytest.raises(InvalidArgumentError, match="integer"):
        check_read_range(7, 0, "5", 10)


def test_batches_never_cross_a_fragment_and_respect_the_size():
    md = metadata(0, 10, 20)
    batches = list(plan_batches(md, 3, 24, 4))
    assert [(b.first_entry_id, b.last_entry_id) for b in batches] == [
        (3, 6), (7, 9), (10, 13), (14, 17), (18, 19), (20, 23), (24, 24)]
    assert [b.ensemble[0] for b in batches] == ["a0", "a0", "a10", "a10", "a10", "a20", "a20"]
    assert fragment_last_entry(md, 10) == 19 and fragment_last_entry(md, 25) is None
    covered = [e for b in plan_batches(md, 0, 40, 7) for e in range(b.first_entry_id, b.last_entry_id + 1)]
    assert covered == list(range(41))
    with pytest.raises(InvalidArgumentError):
        list(plan_batches(md, 0, 3, 0))


def test_lac_never_goes_back():
    assert advance_lac(5, 3) == 5
    assert advance_lac(5, 9) == 9


def slow(delay=0.05, *, timed_at, last_answer_at, now, sent_at=9.0, newest_answered_sent_at=9.5, others=0):
    return slow_after(delay, timed_at, last_answer_at, now, sent_at=sent_at,
                      newest_answered_sent_at=newest_answered_sent_at, others_in_flight=others)


def test_L7_a_replica_is_slow_only_after_the_delay_without_progress():
    assert slow(timed_at=10.0, last_answer_at=float("-inf"), now=10.02) == pytest.approx(0.03)
    assert slow(timed_at=10.0, last_answer_at=9.0, now=10.05) <= 0  # an answer before the wait
    assert slow(timed_at=10.0, last_answer_at=10.04, now=10.06) == pytest.approx(0.03)  # restarted
    assert slow(timed_at=10.0, last_answer_at=10.04, now=10.09) <= 0


def test_L7_with_other_reads_out_a_replica_is_slow_only_once_a_read_sent_after_it_was_answered():
    never = float("-inf")
    # a fresh reader's first batch, sent with the batches read ahead: nothing answered yet
    assert slow(timed_at=10.0, last_answer_at=never, now=11.0, sent_at=10.0, newest_answered_sent_at=never,
                others=14) == pytest.approx(0.05)  # look again a delay later: an answer could come now
    # answers came, but only of reads sent before it (queued ahead of it): not overtaken
    assert slow(timed_at=10.0, last_answer_at=10.9, now=11.0, sent_at=10.0, newest_answered_sent_at=9.9,
                others=3) == pytest.approx(0.05)
    # a read sent after it (here: at the same instant) was answered: the clock runs from the last answer
    assert slow(timed_at=10.0, last_answer_at=10.9, now=11.0, sent_at=10.0, newest_answered_sent_at=10.0,
                others=3) == pytest.approx(-0.05)
    assert slow(timed_at=10.0, last_answer_at=10.98, now=11.0, sent_at=10.0, newest_answered_sent_at=10.5,
                others=3) == pytest.approx(0.03)
    # alone (no other read out, e.g. the only batch of a small read): nothing to compare with, the delay counts
    assert slow(timed_at=10.0, last_answer_at=never, now=10.06, sent_at=10.0, newest_answered_sent_at=never,
                others=0) <= 0


@pytest.mark.parametrize("others", [0, 1, 5])
def test_L7_exhaustively_on_a_grid_of_times(others):
    """Every combination of times on a 10 ms grid against the rule written out in docs/protocol.md L7."""
    grid = [float("-inf")] + [round(0.01 * tick, 2) for tick in range(12)]
    delay = 0.03
    for sent_at in grid[1:]:
        for timed_at in (t for t in grid[1:] if t >= sent_at):
            for last_answer in grid:
                for newest_sent in (t for t in grid if t <= max(last_answer, sent_at)):
                    for now in (t for t in grid[1:] if t >= max(timed_at, last_answer)):
                        wait = slow_after(delay, timed_at, last_answer, now, sent_at=sent_at,
                                          newest_answered_sent_at=newest_sent, others_in_flight=others)
                        overtaken = newest_sent >= sent_at
                        quiet_for = now - max(timed_at, last_answer)
                        is_slow = (overtaken or others == 0) and quiet_for >= delay - 1e-9
                        assert (wait <= 1e-9) == is_slow, (sent_at, timed_at, last_answer, newest_sent, now)
                        assert wait <= delay + 1e-9  # never waits longer than one delay before looking again
                        if not is_slow and (overtaken or others == 0):
                            assert now + wait == pytest.approx(max(timed_at, last_answer) + delay)


def test_L7_checks_its_arguments():
    with pytest.raises(InvalidArgumentError, match="delay"):
        slow(0, timed_at=1.0, last_answer_at=1.0, now=1.0)
    with pytest.raises(InvalidArgumentError, match="others_in_flight"):
        slow(timed_at=1.0, last_answer_at=1.0, now=1.0, others=-1)
