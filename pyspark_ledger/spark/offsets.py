"""Streaming offsets of a ``ledger`` stream and the startingOffsets / endingOffsets options.

A stream has partitions 0..N-1, each a log of ledgers. Its offset is one
``LogPosition`` per partition, meaning "the next entry to read" there. Spark
keeps offsets as JSON, and JSON object keys are strings, so the offset's JSON
form uses string partition numbers, in numeric order::

    {"0": {"ledger": 3, "entry": 17}, "1": {"ledger": 0, "entry": 0}}

``ledger`` is the ledger's sequence number in the partition's log (see
``pyspark_ledger.log.positions``), not its ledger id.

The ``startingOffsets`` and ``endingOffsets`` options take ``"earliest"``,
``"latest"`` or a JSON object with a position per partition in any form
``parse_position`` accepts (a ``{"ledger", "entry"}`` object, ``"3:17"``,
``"earliest"``/``-2``, ``"latest"``/``-1``), e.g. ``{"0": "3:17", "2": "latest"}``.
Partitions the object does not name start at the option's default
(``earliest`` for startingOffsets, ``latest`` for endingOffsets). A batch read
refuses ``latest`` as a start and ``earliest`` as an end.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError
from pyspark_ledger.log.positions import EARLIEST, LATEST, LogPosition, parse_position

STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
OFFSETS_FORMS = ('"earliest", "latest", or a JSON object of partition -> position such as '
                 '{"0": {"ledger": 3, "entry": 17}, "1": "earliest"}')


def _check_partition(key: Any, what: str) -> int:
    """A partition number from a JSON key ("0") or an int."""
    if isinstance(key, bool):
        raise InvalidArgumentError(f"{what}: partition {key!r} is not a partition number")
    if isinstance(key, str) and key.strip().isascii() and key.strip().isdigit():
        return int(key.strip())
    if isinstance(key, int) and key >= 0:
        return key
    raise InvalidArgumentError(
        f"{what}: partition {key!r} is not a partition number; keys are partitions "
        "0, 1, 2, ... written as JSON strings, e.g. {\"0\": {\"ledger\": 3, \"entry\": 17}}")


def _sorted_items(positions: Mapping[Any, Any], what: str) -> tuple[tuple[int, LogPosition], ...]:
    items: dict[int, LogPosition] = {}
    for key, value in positions.items():
        partition = _check_partition(key, what)
        if partition in items:
            raise InvalidArgumentError(f"{what}: partition {partition} is given twice")
        items[partition] = parse_position(value, what=f"{what}, partition {partition}:")
    return tuple(sorted(items.items()))


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """One concrete LogPosition per stream partition; what Spark checkpoints."""

    positions: tuple[tuple[int, LogPosition], ...]

    def __post_init__(self) -> None:
        partitions = [partition for partition, _ in self.positions]
        if partitions != sorted(set(partitions)):
            raise InvalidArgumentError(
                f"stream offset partitions must be unique and ascending, got {partitions}")
        for partition, position in self.positions:
            if not isinstance(position, LogPosition) or position.is_sentinel:
                raise InvalidArgumentError(
                    f"stream offset of partition {partition} must be a concrete LogPosition, "
                    f"got {position!r}: resolve earliest/latest against the log first")

    @classmethod
    def of(cls, positions: Mapping[int, LogPosition]) -> "StreamOffset":
        """From a mapping partition -> position (positions in any accepted form)."""
        return cls(_sorted_items(positions, "stream offset"))

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | str) -> "StreamOffset":
        """From the dict Spark hands back (string keys) or its JSON text."""
        data = _load_json(value, "stream offset") if isinstance(value, str) else value
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(
                f"stream offset must be a JSON object of partition -> position, got {value!r}")
        return cls(_sorted_items(data, "stream offset"))

    def to_json(self) -> dict[str, dict[str, int]]:
        """The dict for Spark: string partition keys in numeric order."""
        return {str(partition): position.to_dict() for partition, position in self.positions}

    def to_json_string(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(partition for partition, _ in self.positions)

    def items(self) -> Iterator[tuple[int, LogPosition]]:
        return iter(self.positions)

    def __getitem__(self, partition: int) -> LogPosition:
        for known, position in self.positions:
            if known == partition:
                return position
        raise KeyError(partition)

    def get(self, partition: int, default: LogPosition | None = None) -> LogPosition | None:
        try:
            return self[partition]
        except KeyError:
            return default

    def __len__(self) -> int:
        return len(self.positions)

    def with_positions(self, changes: Mapping[int, LogPosition]) -> "StreamOffset":
        """A copy with some partitions' positions replaced or added."""
        merged = dict(self.positions)
        merged.update(changes)
        return StreamOffset.of(merged)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """startingOffsets / endingOffsets as given: a default plus explicit partitions.

    Positions may be the EARLIEST / LATEST sentinels; the reader resolves them
    against each partition's log (``position_for`` then the log layer).
    """

    option: str
    default: LogPosition
    positions: tuple[tuple[int, LogPosition], ...] = ()

    def position_for(self, partition: int) -> LogPosition:
        for known, position in self.positions:
            if known == partition:
                return position
        return self.default

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(partition for partition, _ in self.positions)

    def check_partitions(self, num_partitions: int) -> None:
        """Refuse partitions the stream does not have, naming the option."""
        unknown = [partition for partition in self.partitions if partition >= num_partitions]
        if unknown:
            raise InvalidConfigurationError(
                f"option {self.option} names partition(s) {unknown}, but the stream has "
                f"{num_partitions} partition(s): 0..{num_partitions - 1}")

    def to_json(self) -> dict[str, Any] | str:
        """The option value that parses back to this spec."""
        if not self.positions:
            return str(self.default)
        return {str(partition): position.to_json() for partition, position in self.positions}


def parse_starting_offsets(value: Any, *, streaming: bool) -> OffsetSpec:
    """The startingOffsets option (default earliest); a batch read cannot start at latest."""
    refused = () if streaming else (LATEST,)
    why = "a batch read would read nothing; use endingOffsets to stop early"
    return _parse_spec(value, STARTING_OFFSETS, EARLIEST, refused, why)


def parse_ending_offsets(value: Any) -> OffsetSpec:
    """The endingOffsets option of a batch read (default latest); earliest is refused."""
    why = "a batch read ending at earliest would read nothing"
    return _parse_spec(value, ENDING_OFFSETS, LATEST, (EARLIEST,), why)


def _parse_spec(value: Any, option: str, default: LogPosition,
                refused: Iterable[LogPosition], why: str) -> OffsetSpec:
    if value is None:
        return OffsetSpec(option, default)
    if not isinstance(value, (Mapping, str)):
        raise InvalidConfigurationError(
            f"option {option}={value!r} is malformed; accepted: {OFFSETS_FORMS}")
    try:
        spec = _spec_from(value if isinstance(value, Mapping) else _spec_value(value, option), option, default)
    except InvalidArgumentError as exc:  # a malformed position, partition or JSON text: the option is wrong
        raise InvalidConfigurationError(str(exc)) from exc
    _refuse(spec, refused, why)
    return spec


def _spec_value(text: str, option: str) -> Any:
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    if not word.startswith("{"):
        raise InvalidConfigurationError(
            f"option {option}={text!r} is malformed; accepted: {OFFSETS_FORMS}")
    return _load_json(text, f"option {option}")


def _spec_from(data: Any, option: str, default: LogPosition) -> OffsetSpec:
    if isinstance(data, str):
        return OffsetSpec(option, EARLIEST if data == "earliest" else LATEST)
    if not isinstance(data, Mapping):
        raise InvalidConfigurationError(
            f"option {option}={data!r} is malformed; accepted: {OFFSETS_FORMS}")
    return OffsetSpec(option, default, _sorted_items(data, f"option {option}"))


def _refuse(spec: OffsetSpec, refused: Iterable[LogPosition], why: str) -> None:
    for sentinel in refused:
        if spec.default == sentinel and not spec.positions:
            raise InvalidConfigurationError(f"option {spec.option}={sentinel} is not allowed: {why}")
        named = [partition for partition, position in spec.positions if position == sentinel]
        if named:
            raise InvalidConfigurationError(
                f"option {spec.option} puts partition(s) {named} at {sentinel}, which is not "
                f"allowed: {why}")


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"{what} {text!r} is not a valid JSON object ({exc}); accepted: {OFFSETS_FORMS}") from exc


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"duplicate key(s) {duplicates}")
    return dict(pairs)
