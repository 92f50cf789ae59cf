"""The storage façade's request and answer types, and the lock-free validation of an add.

``checked_lac`` does everything about an add that needs no ledger state
(the ids, the master key and the entry header; the storage encodes ADD
journal records, whose CRC is the costly part, outside its lock too);
``admit_batch`` then decides, under the lock, which adds the ledgers' state
accepts (``refuse_failed_ledgers`` first answers IO_ERROR to adds of a ledger
whose index failed; ``drop_unindexed`` takes out those found failing while
stored). ``running_future`` and
``completion`` build the futures the façade answers with.

An add is a plain 5-tuple (ledger id, entry id, master key, body, recovery);
``AddOp`` names its fields for callers that like names. The add path runs
once per entry, so it builds tuples, not objects: a NamedTuple or a
dataclass per entry costs more than everything else the bookie does with a
small entry.
"""
from __future__ import annotations

import concurrent.futures
import hmac
import struct
from dataclasses import dataclass
from typing import Callable, NamedTuple

from bookie_server.files import Buffer
from bookie_server.journal_format import encode_ledger_key
from bookie_server.ledger_state import MAX_KEY_BYTES, LedgerRecord, LedgerStates
from pyspark_ledger.entry import HEADER_SIZE as ENTRY_HEADER_SIZE
from pyspark_ledger.entry import peek_header
from pyspark_ledger.errors import CorruptEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

MAX_LEDGER_ID = 2**64 - 1
MAX_STORED_ENTRY_ID = 2**63 - 1  # what storage itself can hold (the request edge accepts less: limits.py)
MAX_BODY_BYTES = 2**31 - 64  # record lengths are u32 in the journal and entry logs
_LARGEST_DIGEST = 32  # HMAC-SHA256; the fast header check only takes bodies at least this much past the header
_FAST_MIN_BODY = ENTRY_HEADER_SIZE + _LARGEST_DIGEST
_ENTRY_IDS = struct.Struct(">Qqq")  # ledger id, entry id, LAC at offset 4 of an encoded entry
_GOOD_PREFIXES: set[bytes] = set()  # entry magic+version+digest prefixes peek_header accepted


class AddOp(NamedTuple):
    """One entry to store; ``body`` is the encoded entry (pyspark_ledger.entry). Any 5-tuple will do."""

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


def checked_lac(add: tuple) -> int | None:
    """The LAC in a well-formed add's entry header, or None if the add is malformed (BAD_REQUEST)."""
    try:
        ledger_id, entry_id, master_key, body, _ = add
        # valid_ledger_id and valid_key, inlined (this runs once per entry)
        if not (isinstance(ledger_id, int) and 0 <= ledger_id <= MAX_LEDGER_ID
                and isinstance(master_key, (bytes, bytearray)) and 0 < len(master_key) <= MAX_KEY_BYTES
                and isinstance(entry_id, int) and 0 <= entry_id <= MAX_STORED_ENTRY_ID):
            return None
        size = len(body)
        if size > MAX_BODY_BYTES:
            return None
        if size >= _FAST_MIN_BODY and type(body) is bytes and body[:4] in _GOOD_PREFIXES:
            header_ledger, header_entry, lac = _ENTRY_IDS.unpack_from(body, 4)
        else:
            header = peek_header(body)
            header_ledger, header_entry, lac = header.ledger_id, header.entry_id, header.last_add_confirmed
            if size >= _FAST_MIN_BODY:
                _GOOD_PREFIXES.add(bytes(body[:4]))  # any body this long with this prefix passes peek_header
        if header_ledger != ledger_id or header_entry != entry_id:
            return None
        return lac
    except (CorruptEntryError, TypeError, AttributeError, ValueError):
        return None


class AdmittedBatch:
    """The accepted adds of one ``add_entries`` call and the journal records they need."""

    __slots__ = ("accepted", "chunks", "records", "entries", "unjournaled")

    def __init__(self) -> None:
        self.accepted: list[int] = []  # positions of the accepted adds in the request
        self.chunks: list = []  # their journal records, in order (ledger keys first where new)
        self.records = 0  # journal records in chunks
        self.entries: list[tuple] = []  # StoredEntry-shaped tuples: (record, ledger id, entry id, body, LAC)
        self.unjournaled: list[int] = []  # indexes into entries whose bodies the journal does not carry


def admit_batch(states: LedgerStates, valid: list[tuple], statuses: list[int], refusal: int | None) -> AdmittedBatch:
    """Decide each well-formed add's status (storage lock held); collect the accepted ones and their journal
    records. ``valid`` holds (position, add, LAC, ADD record chunks or None); ``refusal`` answers them all.

    Consecutive adds to one ledger with the same key (the usual batch) look the ledger up once."""
    batch = AdmittedBatch()
    if refusal is not None:
        for item in valid:
            statuses[item[0]] = refusal
        return batch
    accepted, entries, chunks = batch.accepted, batch.entries, batch.chunks
    last_ledger = last_key = record = None
    for position, (ledger_id, entry_id, key, body, recovery), lac, add_chunks in valid:
        if ledger_id != last_ledger or key != last_key:
            record = _ledger_for(states, ledger_id, key, batch)
            last_ledger, last_key = ledger_id, key
        if record is None:
            statuses[position] = pb.UNAUTHORIZED
        elif record.fenced and not recovery:
            statuses[position] = pb.FENCED
        else:
            statuses[position] = pb.OK
            accepted.append(position)
            entries.append((record, ledger_id, entry_id, body, lac))
            if add_chunks is not None:
                chunks.extend(add_chunks)
                batch.records += 1
            else:
                batch.unjournaled.append(len(entries) - 1)
    return batch


def _ledger_for(states: LedgerStates, ledger_id: int, master_key: bytes, batch: AdmittedBatch) -> LedgerRecord | None:
    """The ledger's record (created, with its LEDGER_KEY journal record, if new); None if the key is wrong."""
    record = states.get(ledger_id)
    if record is None:
        record = states.create(ledger_id, master_key)
        batch.chunks.append(encode_ledger_key(ledger_id, master_key))
        batch.records += 1
    elif not hmac.compare_digest(record.master_key, master_key):
        return None
    return record


def refuse_failed_ledgers(valid: list[tuple], failed: dict[int, str], statuses: list[int]) -> list[tuple]:
    """The adds of ``valid`` whose ledger's index has not failed; the others answer IO_ERROR."""
    kept = []
    for item in valid:
        if item[1][0] in failed:
            statuses[item[0]] = pb.IO_ERROR
        else:
            kept.append(item)
    return kept


def drop_unindexed(batch: AdmittedBatch, failed: set[tuple[int, int]], statuses: list[int]) -> None:
    """Take the adds that could not be indexed out of the batch's acknowledgements (they answer IO_ERROR) and
    out of its journal references. (Their ADD records may still be journaled: an add answered IO_ERROR may or
    may not be stored, as with any failed write.)"""
    bad = {i for i, entry in enumerate(batch.entries) if (entry[1], entry[2]) in failed}
    for i in bad:
        statuses[batch.accepted[i]] = pb.IO_ERROR
    batch.accepted[:] = [position for i, position in enumerate(batch.accepted) if i not in bad]
    batch.unjournaled[:] = [i for i in batch.unjournaled if i not in bad]


def running_future() -> concurrent.futures.Future:
    """A future already running: results are always delivered, callers cannot cancel."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_running_or_notify_cancel()  # results are always delivered; callers cannot cancel
    return future


def completion(on_done: Callable[[list[int]], None], statuses: list[int],
               accepted: list[int]) -> Callable[[bool], None]:
    """The journal callback of an add batch: every accepted add becomes OK (durable) or IO_ERROR, then
    ``on_done(statuses)``."""
    def complete(durable: bool) -> None:
        code = pb.OK if durable else pb.IO_ERROR
        for position in accepted:
            statuses[position] = code
        on_done(statuses)
    return complete
