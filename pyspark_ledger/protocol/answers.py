"""What a bookie answered, classified the way the protocol decides on it.

Three kinds, and only three (docs/protocol.md A1-A3):

* ``POSITIVE``  -- the bookie answered OK (it has the entry / its LAC).
* ``NEGATIVE``  -- an explicit "no such entry" or "no such ledger" answer.
* ``UNKNOWN``   -- a timeout, transport error, I/O error, corrupt replica,
  unauthorized, or any status this code does not know.

An unknown is never turned into a negative: "absent" is decided only on
explicit negatives, and confusing the two is how ledgers get truncated.
The I/O layer builds these values from wire responses with ``kind_for_status``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from pyspark_ledger.errors import InvalidArgumentError


class AnswerKind(enum.Enum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    UNKNOWN = "unknown"


_NEGATIVE_STATUSES = frozenset({"NO_SUCH_ENTRY", "NO_SUCH_LEDGER"})


def kind_for_status(status_name: str) -> AnswerKind:
    """Classify a wire status name (``bookie.proto``'s ``Status``).

    OK is positive; NO_SUCH_ENTRY / NO_SUCH_LEDGER are negative; everything
    else -- FENCED, IO_ERROR, UNAUTHORIZED, STATUS_UNSPECIFIED, names added
    later -- is unknown.
    """
    if status_name == "OK":
        return AnswerKind.POSITIVE
    if status_name in _NEGATIVE_STATUSES:
        return AnswerKind.NEGATIVE
    return AnswerKind.UNKNOWN


@dataclass(frozen=True, slots=True)
class LacAnswer:
    """One bookie's answer to a (fencing) read of the last add confirmed."""

    kind: AnswerKind
    last_add_confirmed: int = -1
    reason: str = ""

    @classmethod
    def ok(cls, last_add_confirmed: int) -> "LacAnswer":
        if not isinstance(last_add_confirmed, int) or last_add_confirmed < -1:
            raise InvalidArgumentError(
                f"last_add_confirmed must be an integer >= -1, got {last_add_confirmed!r}"
            )
        return cls(AnswerKind.POSITIVE, last_add_confirmed)

    @classmethod
    def no_such_ledger(cls) -> "LacAnswer":
        """The bookie never stored the ledger: it knows no LAC (counts as -1)."""
        return cls(AnswerKind.NEGATIVE, -1, "no such ledger")

    @classmethod
    def unknown(cls, reason: str) -> "LacAnswer":
        return cls(AnswerKind.UNKNOWN, -1, reason)


@dataclass(frozen=True, slots=True)
class ReadAnswer:
    """One bookie's answer to a read of one entry.

    ``present`` must only be built from a replica whose digest and ids were
    verified (``EntryCodec.decode``); ``length`` is the cumulative ledger
    length from that entry's header. A replica failing verification is
    ``unknown``, not negative.
    """

    kind: AnswerKind
    body: bytes = b""
    length: int = 0
    reason: str = ""

    @classmethod
    def present(cls, body: bytes, length: int) -> "ReadAnswer":
        if not isinstance(length, int) or length < 0:
            raise InvalidArgumentError(f"entry length must be an integer >= 0, got {length!r}")
        return cls(AnswerKind.POSITIVE, bytes(body), length)

    @classmethod
    def no_such_entry(cls) -> "ReadAnswer":
        return cls(AnswerKind.NEGATIVE, reason="no such entry")

    @classmethod
    def no_such_ledger(cls) -> "ReadAnswer":
        return cls(AnswerKind.NEGATIVE, reason="no such ledger")

    @classmethod
    def unknown(cls, reason: str) -> "ReadAnswer":
        return cls(AnswerKind.UNKNOWN, reason=reason)
