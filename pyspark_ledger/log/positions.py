"""Positions in a log of ledgers: (the ledger's sequence number in the log, entry id).

A log is an ordered list of ledgers (docs/protocol.md, section G); each ledger
gets a sequence number when it is added to the list: 0 for the log's first
ledger, then 1, 2, ... in order, never reused, unchanged when older ledgers
are truncated away. A ``LogPosition(ledger_seq, entry_id)`` names one entry
slot of the log. Positions order like the log: by ledger, then by entry.

As a stream offset a position means "the next entry to read": a reader that
starts at ``(3, 17)`` reads entry 17 of ledger 3 first; ``(3, 18)`` after
ledger 3 closed at entry 17 is the same point as ``(4, 0)``. The log layer,
which knows where ledgers end, resolves such equivalences; a position itself
is pure data.

Two sentinels stand for ends that the log resolves when a reader starts:
``EARLIEST`` (the oldest entry still in the log) orders before every position,
``LATEST`` (the end of the log) after every position.

Forms (``parse_position`` accepts all of them)::

    {"ledger": 3, "entry": 17}      to_json() / to_dict() of a position
    "3:17"                          str(position)
    "earliest" / "latest"           the sentinels (any case); also -2 / -1 as in Kafka
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from pyspark_ledger.errors import InvalidArgumentError

MAX_INT64 = 2**63 - 1
EARLIEST_NAME = "earliest"
LATEST_NAME = "latest"
KAFKA_EARLIEST = -2
KAFKA_LATEST = -1
POSITION_FORMS = ('{"ledger": <ledger sequence number>, "entry": <entry id>}, "<ledger>:<entry>", '
                  '"earliest" (or -2) or "latest" (or -1)')
_SENTINEL_FIELDS = {EARLIEST_NAME: (-1, -1), LATEST_NAME: (MAX_INT64, MAX_INT64)}
_STRING_FORM = re.compile(r"\s*(\d{1,19})\s*:\s*(\d{1,19})\s*", re.ASCII)


@dataclass(frozen=True, slots=True, order=True)
class LogPosition:
    """An entry slot of a log: ledger ``ledger_seq`` (its place in the log), entry ``entry_id``.

    Immutable, hashable and totally ordered; ``EARLIEST`` < every position < ``LATEST``.
    """

    ledger_seq: int
    entry_id: int

    def __post_init__(self) -> None:
        if (self.ledger_seq, self.entry_id) in _SENTINEL_FIELDS.values():
            return
        for name, value in (("ledger_seq", self.ledger_seq), ("entry_id", self.entry_id)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_INT64:
                raise InvalidArgumentError(
                    f"log position {name} must be an integer in 0..{MAX_INT64 - 1}, got {value!r}")

    # --- kinds ----------------------------------------------------------------
    @property
    def is_earliest(self) -> bool:
        return (self.ledger_seq, self.entry_id) == _SENTINEL_FIELDS[EARLIEST_NAME]

    @property
    def is_latest(self) -> bool:
        return (self.ledger_seq, self.entry_id) == _SENTINEL_FIELDS[LATEST_NAME]

    @property
    def is_sentinel(self) -> bool:
        return self.is_earliest or self.is_latest

    # --- moving ---------------------------------------------------------------
    def next_entry(self) -> "LogPosition":
        """The slot after this one in the same ledger."""
        self._require_concrete("next_entry")
        return LogPosition(self.ledger_seq, self.entry_id + 1)

    def next_ledger(self) -> "LogPosition":
        """The first slot of the next ledger of the log."""
        self._require_concrete("next_ledger")
        return LogPosition(self.ledger_seq + 1, 0)

    # --- forms ----------------------------------------------------------------
    @classmethod
    def parse(cls, value: Any) -> "LogPosition":
        """Any accepted form (dict, "3:17", "earliest", -2, ...) to a position."""
        return parse_position(value)

    def to_json(self) -> dict[str, int] | str:
        """``{"ledger": s, "entry": e}``, or ``"earliest"`` / ``"latest"`` for a sentinel."""
        if self.is_sentinel:
            return EARLIEST_NAME if self.is_earliest else LATEST_NAME
        return {"ledger": self.ledger_seq, "entry": self.entry_id}

    def to_dict(self) -> dict[str, int]:
        """``{"ledger": s, "entry": e}``; a sentinel has no dict form (use ``to_json``)."""
        self._require_concrete("to_dict")
        return {"ledger": self.ledger_seq, "entry": self.entry_id}

    def __str__(self) -> str:
        if self.is_sentinel:
            return EARLIEST_NAME if self.is_earliest else LATEST_NAME
        return f"{self.ledger_seq}:{self.entry_id}"

    def __repr__(self) -> str:
        if self.is_sentinel:
            return f"LogPosition.{str(self).upper()}"
        return f"LogPosition(ledger_seq={self.ledger_seq}, entry_id={self.entry_id})"

    def _require_concrete(self, operation: str) -> None:
        if self.is_sentinel:
            raise InvalidArgumentError(
                f"{operation}() needs a concrete log position, not the sentinel {self}: "
                "resolve it against the log first")


EARLIEST = LogPosition(*_SENTINEL_FIELDS[EARLIEST_NAME])
LATEST = LogPosition(*_SENTINEL_FIELDS[LATEST_NAME])


def parse_position(value: Any, *, what: str = "log position") -> LogPosition:
    """A LogPosition from any accepted form; InvalidArgumentError naming ``what`` if malformed."""
    if isinstance(value, LogPosition):
        return value
    if isinstance(value, Mapping):
        return _from_mapping(value, what)
    if isinstance(value, str):
        return _from_string(value, what)
    if isinstance(value, int) and not isinstance(value, bool):
        if value in (KAFKA_EARLIEST, KAFKA_LATEST):
            return EARLIEST if value == KAFKA_EARLIEST else LATEST
    raise _malformed(value, what)


def _from_mapping(value: Mapping, what: str) -> LogPosition:
    keys = set(value)
    if keys != {"ledger", "entry"}:
        raise InvalidArgumentError(
            f"{what} {dict(value)!r} must have exactly the keys 'ledger' and 'entry' "
            f"(got {sorted(map(str, keys))}); accepted forms: {POSITION_FORMS}")
    ledger_seq, entry_id = value["ledger"], value["entry"]
    for name, number in (("ledger", ledger_seq), ("entry", entry_id)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise InvalidArgumentError(
                f"{what} {dict(value)!r}: '{name}' must be an integer >= 0, got {number!r}")
    return _make(ledger_seq, entry_id, value, what)


def _from_string(value: str, what: str) -> LogPosition:
    text = value.strip().lower()
    if text == EARLIEST_NAME:
        return EARLIEST
    if text == LATEST_NAME:
        return LATEST
    match = _STRING_FORM.fullmatch(text)
    if match is None:
        raise _malformed(value, what)
    return _make(int(match.group(1)), int(match.group(2)), value, what)


def _make(ledger_seq: int, entry_id: int, value: Any, what: str) -> LogPosition:
    try:
        return LogPosition(ledger_seq, entry_id)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{what} {value!r}: {exc}") from exc


def _malformed(value: Any, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} {value!r} is malformed; accepted forms: {POSITION_FORMS}")
