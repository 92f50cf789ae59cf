"""Log positions: order, hashing, sentinels and every serialised form."""
from __future__ import annotations

import json
import random

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.log import EARLIEST, LATEST, LogPosition, parse_position
from pyspark_ledger.log.positions import MAX_INT64


def test_positions_order_by_ledger_then_entry():
    ordered = [EARLIEST, LogPosition(0, 0), LogPosition(0, 1), LogPosition(0, 99),
               LogPosition(1, 0), LogPosition(1, 5), LogPosition(7, 0), LATEST]
    shuffled = ordered[:]
    random.Random(4).shuffle(shuffled)
    assert sorted(shuffled) == ordered
    assert LogPosition(2, 0) > LogPosition(1, 10**9)
    assert max(ordered[1:-1]) == LogPosition(7, 0)


def test_sentinels_bound_every_concrete_position():
    largest = LogPosition(MAX_INT64 - 1, MAX_INT64 - 1)
    assert EARLIEST < LogPosition(0, 0) and largest < LATEST
    assert EARLIEST.is_earliest and EARLIEST.is_sentinel and not EARLIEST.is_latest
    assert LATEST.is_latest and LATEST.is_sentinel and not LATEST.is_earliest
    assert not LogPosition(0, 0).is_sentinel


def test_positions_are_hashable_values():
    positions = {LogPosition(3, 17), LogPosition(3, 17), LogPosition(3, 18), EARLIEST, EARLIEST}
    assert len(positions) == 3
    assert {LogPosition(3, 17): "x"}[LogPosition(3, 17)] == "x"
    with pytest.raises(AttributeError):
        LogPosition(3, 17).entry_id = 4  # frozen


def test_moving_within_and_across_ledgers():
    assert LogPosition(3, 17).next_entry() == LogPosition(3, 18)
    assert LogPosition(3, 17).next_ledger() == LogPosition(4, 0)


@pytest.mark.parametrize("sentinel", [EARLIEST, LATEST])
def test_sentinels_cannot_move_or_become_dicts(sentinel):
    for operation in (sentinel.next_entry, sentinel.next_ledger, sentinel.to_dict):
        with pytest.raises(InvalidArgumentError, match="resolve it against the log"):
            operation()


@pytest.mark.parametrize("position", [LogPosition(0, 0), LogPosition(3, 17),
                                      LogPosition(MAX_INT64 - 1, 12), EARLIEST, LATEST])
def test_every_form_round_trips(position):
    as_json = json.loads(json.dumps(position.to_json()))
    assert parse_position(as_json) == position
    assert parse_position(str(position)) == position
    assert LogPosition.parse(str(position)) == position
    assert parse_position(position) is position


def test_concrete_forms_look_as_documented():
    position = LogPosition(3, 17)
    assert position.to_json() == position.to_dict() == {"ledger": 3, "entry": 17}
    assert str(position) == "3:17"
    assert repr(position) == "LogPosition(ledger_seq=3, entry_id=17)"
    assert (str(EARLIEST), str(LATEST)) == ("earliest", "latest")
    assert (EARLIEST.to_json(), LATEST.to_json()) == ("earliest", "latest")
    assert repr(LATEST) == "LogPosition.LATEST"


@pytest.mark.parametrize("value, expected", [
    ("EARLIEST", EARLIEST), (" Latest ", LATEST), (-2, EARLIEST), (-1, LATEST),
    (" 3 : 17 ", LogPosition(3, 17)), ({"entry": 1, "ledger": 2}, LogPosition(2, 1)),
])
def test_accepted_spellings(value, expected):
    assert parse_position(value) == expected


@pytest.mark.parametrize("value, fragment", [
    ("3-17", "malformed"), ("3:", "malformed"), (":17", "malformed"), ("-3:1", "malformed"),
    ("3:17:1", "malformed"), ("²:1", "malformed"), ("soon", "malformed"), (5, "malformed"),
    (True, "malformed"), (None, "malformed"), (3.5, "malformed"), ([3, 17], "malformed"),
    ({"ledger": 3}, "exactly the keys"), ({"ledger": 3, "entry": 1, "x": 0}, "exactly the keys"),
    ({"ledger": -1, "entry": 0}, "'ledger' must be an integer >= 0"),
    ({"ledger": 1, "entry": "2"}, "'entry' must be an integer >= 0"),
    ({"ledger": True, "entry": 2}, "'ledger' must be an integer >= 0"),
    (f"{MAX_INT64}:0", "ledger_seq must be an integer"),
])
def test_malformed_positions_are_refused_with_the_accepted_forms(value, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment) as caught:
        parse_position(value, what="startingOffsets partition 0")
    assert "startingOffsets partition 0" in str(caught.value)


@pytest.mark.parametrize("fields", [(-1, 0), (0, -1), (-2, -2), (MAX_INT64, 0), (1.0, 2), (True, 0)])
def test_constructor_refuses_impossible_positions(fields):
    with pytest.raises(InvalidArgumentError, match="must be an integer"):
        LogPosition(*fields)
