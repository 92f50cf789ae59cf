"""Stream offsets and the startingOffsets / endingOffsets options."""
from __future__ import annotations

import json

import pytest

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError
from pyspark_ledger.log import EARLIEST, LATEST, LogPosition
from pyspark_ledger.spark.offsets import (OffsetSpec, StreamOffset, parse_ending_offsets,
                                          parse_starting_offsets)


def offset(**by_partition: tuple[int, int]) -> StreamOffset:
    return StreamOffset.of({int(key[1:]): LogPosition(*value) for key, value in by_partition.items()})


# --- StreamOffset -----------------------------------------------------------------------


def test_offset_json_uses_string_keys_in_numeric_order():
    value = StreamOffset.of({10: LogPosition(1, 2), 2: LogPosition(0, 5), 0: LogPosition(3, 17)})
    assert list(value.to_json()) == ["0", "2", "10"]
    assert value.to_json()["0"] == {"ledger": 3, "entry": 17}
    assert value.to_json_string() == ('{"0":{"ledger":3,"entry":17},"2":{"ledger":0,"entry":5},'
                                      '"10":{"ledger":1,"entry":2}}')


def test_offset_survives_sparks_json_round_trip():
    value = offset(p0=(3, 17), p1=(0, 0), p12=(9, 4))
    through_spark = json.loads(json.dumps(value.to_json()))  # what latestOffset/partitions get back
    assert StreamOffset.from_json(through_spark) == value
    assert StreamOffset.from_json(value.to_json_string()) == value
    assert StreamOffset.from_json(through_spark).to_json() == through_spark
    assert hash(StreamOffset.from_json(through_spark)) == hash(value)


def test_offset_access():
    value = offset(p0=(3, 17), p2=(1, 1))
    assert value[0] == LogPosition(3, 17) and value.get(2) == LogPosition(1, 1)
    assert value.get(1) is None and value.get(1, EARLIEST) is EARLIEST
    assert value.partitions == (0, 2) and len(value) == 2
    assert dict(value.items()) == {0: LogPosition(3, 17), 2: LogPosition(1, 1)}
    with pytest.raises(KeyError):
        value[1]


def test_with_positions_replaces_and_adds_without_mutating():
    value = offset(p0=(3, 17))
    changed = value.with_positions({0: LogPosition(4, 0), 1: LogPosition(0, 0)})
    assert changed == offset(p0=(4, 0), p1=(0, 0))
    assert value == offset(p0=(3, 17))


@pytest.mark.parametrize("data, fragment", [
    ({"0": "earliest"}, "concrete LogPosition"),
    ({"0": {"ledger": 1}}, "exactly the keys"),
    ({"x": {"ledger": 1, "entry": 0}}, "not a partition number"),
    ({"-1": {"ledger": 1, "entry": 0}}, "not a partition number"),
    ({"0": {"ledger": 1, "entry": 0}, "00": {"ledger": 2, "entry": 0}}, "partition 0 is given twice"),
    ("[1, 2]", "JSON object of partition -> position"),
    ("{not json", "not a valid JSON object"),
])
def test_bad_checkpointed_offsets_are_refused(data, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        StreamOffset.from_json(data if isinstance(data, str) else json.loads(json.dumps(data)))


def test_offset_positions_must_be_sorted_unique_and_concrete():
    with pytest.raises(InvalidArgumentError, match="unique and ascending"):
        StreamOffset(((1, LogPosition(0, 0)), (0, LogPosition(0, 0))))
    with pytest.raises(InvalidArgumentError, match="concrete"):
        StreamOffset(((0, LATEST),))


# --- startingOffsets / endingOffsets ---------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
def test_starting_offsets_default_and_earliest(streaming):
    for value in (None, "earliest", " EARLIEST "):
        spec = parse_starting_offsets(value, streaming=streaming)
        assert spec.default == EARLIEST and spec.positions == ()
        assert spec.position_for(5) == EARLIEST


def test_streaming_may_start_at_latest_but_a_batch_read_may_not():
    assert parse_starting_offsets("latest", streaming=True).position_for(0) == LATEST
    with pytest.raises(InvalidConfigurationError, match="startingOffsets=latest is not allowed"):
        parse_starting_offsets("latest", streaming=False)
    with pytest.raises(InvalidConfigurationError, match=r"startingOffsets puts partition\(s\) \[1\] at latest"):
        parse_starting_offsets('{"1": "latest"}', streaming=False)


def test_json_spec_with_every_position_form():
    spec = parse_starting_offsets(
        '{"0": {"ledger": 3, "entry": 17}, "1": "4:0", "2": "earliest", "3": -2, "5": "latest", "6": -1}',
        streaming=True)
    assert spec.position_for(0) == LogPosition(3, 17)
    assert spec.position_for(1) == LogPosition(4, 0)
    assert spec.position_for(2) == spec.position_for(3) == EARLIEST
    assert spec.position_for(5) == spec.position_for(6) == LATEST
    assert spec.position_for(4) == EARLIEST  # not named: the option's default
    assert spec.partitions == (0, 1, 2, 3, 5, 6)


def test_ending_offsets_default_to_latest_and_refuse_earliest():
    assert parse_ending_offsets(None).position_for(0) == LATEST
    assert parse_ending_offsets("latest").default == LATEST
    assert parse_ending_offsets('{"0": "2:5"}').position_for(1) == LATEST
    with pytest.raises(InvalidConfigurationError, match="endingOffsets=earliest is not allowed"):
        parse_ending_offsets("earliest")
    with pytest.raises(InvalidConfigurationError, match=r"endingOffsets puts partition\(s\) \[0\] at earliest"):
        parse_ending_offsets('{"0": -2}')


@pytest.mark.parametrize("value, fragment", [
    ("first", "accepted: \"earliest\", \"latest\", or a JSON object"),
    ("", "accepted"),
    ('{"0": {"ledger": 3, "entry": 17}', "not a valid JSON object"),
    ('{"0": "3:1", "0": "4:1"}', "duplicate key"),
    ('{"zero": "3:1"}', "partition 'zero' is not a partition number"),
    ('{"0": {"ledger": 3}}', "partition 0: .*exactly the keys 'ledger' and 'entry'"),
    ('{"0": "3-1"}', "partition 0: .*malformed"),
    ("[0]", "accepted"),
    (17, "accepted"),
])
def test_malformed_specs_name_the_option_and_the_accepted_forms(value, fragment):
    with pytest.raises(InvalidConfigurationError, match=fragment) as caught:
        parse_starting_offsets(value, streaming=True)
    assert "startingOffsets" in str(caught.value)


def test_check_partitions_refuses_partitions_the_stream_lacks():
    spec = parse_starting_offsets('{"0": "1:1", "4": "2:2", "7": "3:3"}', streaming=True)
    spec.check_partitions(8)
    with pytest.raises(InvalidConfigurationError,
                       match=r"startingOffsets names partition\(s\) \[4, 7\].* 4 partition\(s\): 0..3"):
        spec.check_partitions(4)


@pytest.mark.parametrize("text", ["earliest", "latest", '{"0": {"ledger": 3, "entry": 17}, "2": "latest"}'])
def test_spec_to_json_parses_back(text):
    spec = parse_starting_offsets(text, streaming=True)
    rendered = spec.to_json()
    again = parse_starting_offsets(rendered if isinstance(rendered, str) else json.dumps(rendered),
                                   streaming=True)
    assert again == spec


def test_spec_accepts_a_mapping_from_python_callers():
    spec = parse_starting_offsets({0: LogPosition(1, 2), "1": "latest"}, streaming=True)
    assert spec == OffsetSpec("startingOffsets", EARLIEST, ((0, LogPosition(1, 2)), (1, LATEST)))
