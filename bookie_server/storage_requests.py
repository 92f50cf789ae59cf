"""The storage façade's request and answer types, and the lock-free validation of an add.

``prepare_add`` does everything about an add that needs no ledger state:
checks the ids, the master key and the entry header, and encodes the add's
ADD journal record when the journal holds bodies (its CRC is the costly part,
so it is done outside the lock). ``running_future`` and ``completion`` build
the futures the façade answers with.
"""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Callable, NamedTuple

from bookie_server.files import Buffer
from bookie_server.journal_format import encode_add
from bookie_server.ledger_state import MAX_KEY_BYTES, LedgerRecord
from pyspark_ledger.entry import peek_header
from pyspark_ledger.errors import CorruptEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

MAX_LEDGER_ID = 2**64 - 1
MAX_ENTRY_ID = 2**63 - 1
MAX_BODY_BYTES = 2**31 - 64  # record lengths are u32 in the journal and entry logs


@dataclass(frozen=True)
class AddOp:
    """One entry to store; ``body`` is the encoded entry (pyspark_ledger.entry)."""

    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool = False


@dataclass(frozen=True)
class LedgerView:
    """What a bookie knows of a ledger; ids are -1 when it has no entry."""

    ledger_id: int
    fenced: bool
    last_add_confirmed: int
    last_entry_id: int


class PreparedAdd(NamedTuple):
    last_add_confirmed: int
    journal_chunks: list[Buffer] | None  # the ADD record's chunks; None when the journal holds references


class StoredEntry(NamedTuple):
    record: LedgerRecord
    ledger_id: int
    entry_id: int
    body: Buffer
    last_add_confirmed: int


def valid_ledger_id(ledger_id: object) -> bool:
    return isinstance(ledger_id, int) and 0 <= ledger_id <= MAX_LEDGER_ID


def valid_key(master_key: object) -> bool:
    return isinstance(master_key, (bytes, bytearray)) and 0 < len(master_key) <= MAX_KEY_BYTES


def prepare_add(add: AddOp, with_body_record: bool = True) -> PreparedAdd | None:
    """The add's LAC and (``with_body_record``) its ADD journal record, or None if the request is
    malformed (BAD_REQUEST)."""
    try:
        if not valid_ledger_id(add.ledger_id) or not valid_key(add.master_key):
            return None
        if not isinstance(add.entry_id, int) or not 0 <= add.entry_id <= MAX_ENTRY_ID:
            return None
        if len(add.body) > MAX_BODY_BYTES:
            return None
        header = peek_header(add.body)
        if header.ledger_id != add.ledger_id or header.entry_id != add.entry_id:
            return None
        chunks = encode_add(add.ledger_id, add.entry_id, add.body) if with_body_record else None
        return PreparedAdd(header.last_add_confirmed, chunks)
    except (CorruptEntryError, TypeError, AttributeError, ValueError):
        return None


def running_future() -> concurrent.futures.Future:
    """A future already running: results are always delivered, callers cannot cancel."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_running_or_notify_cancel()  # results are always delivered; callers cannot cancel
    return future


def completion(future: concurrent.futures.Future, statuses: list[int],
               accepted: list[int]) -> Callable[[bool], None]:
    """The journal callback of an add batch: every accepted add becomes OK (durable) or IO_ERROR."""
    def complete(durable: bool) -> None:
        code = pb.OK if durable else pb.IO_ERROR
        for position in accepted:
            statuses[position] = code
        future.set_result(statuses)
    return complete
