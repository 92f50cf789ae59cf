"""What became of one request to a bookie: the bookie's answer, or why no answer came.

``BookieStatus`` is the one enum for both. Its non-negative members are the wire statuses
(``Status`` in ``proto/pyspark_ledger/wire/v1/bookie.proto``, same names and numbers; a test keeps
them equal). Its negative members never travel on the wire: they name the transport conditions in
which the client got no answer at all. ``pyspark_ledger.errors`` maps each member to its exception.

This module imports nothing of the project, so the error tree (the lowest layer) can use it.
"""
from __future__ import annotations

import enum

__all__ = ["BookieStatus", "as_status"]


class BookieStatus(enum.IntEnum):
    """A bookie's answer (wire statuses, >= 0) or a transport condition (< 0, client side only)."""

    # --- answers of a bookie (the wire enum) ---
    STATUS_UNSPECIFIED = 0
    OK = 1
    NO_SUCH_LEDGER = 2
    NO_SUCH_ENTRY = 3
    FENCED = 4
    UNAUTHORIZED = 5
    READ_ONLY = 6
    TOO_MANY_REQUESTS = 7
    BAD_REQUEST = 8
    IO_ERROR = 9

    # --- no answer came (never on the wire) ---
    #: the bookie could not be reached, or the connection to it broke
    UNAVAILABLE = -1
    #: no answer within the deadline
    TIMEOUT = -2
    #: the call was cancelled before it was answered (the client was closing)
    CANCELLED = -3
    #: the client, or its connection to this bookie, is closed: the request was not sent
    CLOSED = -4
    #: the call failed in another way (another gRPC code, an unexpected error): the message names it
    RPC_FAILED = -5

    @property
    def on_wire(self) -> bool:
        """True for a status a bookie sends; False for a transport condition."""
        return self.value >= 0


_WIRE = {status.value: status for status in BookieStatus if status.on_wire}


def as_status(number: int) -> BookieStatus:
    """The member for a wire status number; numbers a bookie may add later read as STATUS_UNSPECIFIED."""
    return _WIRE.get(number, BookieStatus.STATUS_UNSPECIFIED)
