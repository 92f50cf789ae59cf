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


def test_L7_a_replica_is_slow_only_after_the_delay_without_progress():
    assert slow_after(0.05, timed_at=10.0, last_answer_at=float("-inf"), now=10.02) == pytest.approx(0.03)
    assert slow_after(0.05, timed_at=10.0, last_answer_at=9.0, now=10.05) <= 0  # an answer before the wait
    assert slow_after(0.05, timed_at=10.0, last_answer_at=10.04, now=10.06) == pytest.approx(0.03)  # restarted
    assert slow_after(0.05, timed_at=10.0, last_answer_at=10.04, now=10.09) <= 0
