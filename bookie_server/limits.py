"""Request limits of the bookie: sizes, in-flight adds, read and long-poll caps.

Checks here are cheap and answer with a message naming what is wrong and
the limit; the servicer turns a message into a BAD_REQUEST status. Nothing in
this module raises on malformed input.
"""
from __future__ import annotations

import threading

from pyspark_ledger.entry import peek_header
from pyspark_ledger.errors import CorruptEntryError

MAX_READ_BYTES = 16 * 1024 * 1024   # a range read stops near this many bytes
MAX_LAC_WAIT_S = 60.0               # longest ReadLac long poll
MAX_FENCE_WAIT_S = 30.0             # longest wait for a fence to become durable
GRPC_MESSAGE_MARGIN = 1024 * 1024   # protobuf framing on top of entry bytes
MAX_INT64 = 2**63 - 1


def check_add(ledger_id: int, entry_id: int, master_key: bytes, body: bytes, max_entry_size: int) -> str | None:
    """A message saying why an add is malformed, or None when it may go to storage.

    Only the cheap checks run here; the header is checked by storage, and
    ``explain_bad_add`` says why when storage answers BAD_REQUEST.
    """
    if len(body) > max_entry_size:
        return (f"entry {entry_id} of ledger {ledger_id} is {len(body)} bytes, over this bookie's "
                f"max entry size of {max_entry_size} bytes: split it or raise --max-entry-size")
    if entry_id < 0:
        return f"entry id {entry_id} of ledger {ledger_id} is negative: entry ids start at 0"
    if not master_key:
        return f"add to ledger {ledger_id} entry {entry_id} has an empty master key: derive one from the password"
    return None


def explain_bad_add(ledger_id: int, entry_id: int, master_key: bytes, body: bytes) -> str:
    """Why storage refused an add as BAD_REQUEST (only computed on that path)."""
    if not master_key:
        return f"add to ledger {ledger_id} entry {entry_id} has an empty master key"
    try:
        header = peek_header(body)
    except CorruptEntryError as exc:
        return f"body of ledger {ledger_id} entry {entry_id} is not an encoded entry: {exc}"
    if header.ledger_id != ledger_id or header.entry_id != entry_id:
        return (f"body header names ledger {header.ledger_id} entry {header.entry_id} but the request "
                f"names ledger {ledger_id} entry {entry_id}")
    return f"add to ledger {ledger_id} entry {entry_id} was refused as malformed by storage"


def check_read(first_entry_id: int, last_entry_id: int) -> str | None:
    """A message saying why a read range is malformed, or None."""
    if first_entry_id < 0:
        return f"first_entry_id {first_entry_id} is negative: entry ids start at 0"
    if last_entry_id < first_entry_id:
        return (f"last_entry_id {last_entry_id} is below first_entry_id {first_entry_id}: "
                "use first == last for one entry")
    return None


def read_byte_budget(requested: int) -> int:
    """The bytes a range read may return: the request's max_bytes, capped by the server."""
    if requested <= 0:
        return MAX_READ_BYTES
    return min(requested, MAX_READ_BYTES)


def lac_wait_seconds(timeout_ms: int) -> float:
    """A long poll's wait, capped at MAX_LAC_WAIT_S."""
    return min(max(timeout_ms, 0) / 1000.0, MAX_LAC_WAIT_S)


def grpc_max_message_bytes(max_entry_size: int) -> int:
    """Generous gRPC message limit: room for batches of the largest entries.

    Well above max_entry_size so that an over-size entry reaches the servicer
    and gets a BAD_REQUEST naming the limit instead of a transport error.
    """
    return max(64 * 1024 * 1024, 4 * max_entry_size) + GRPC_MESSAGE_MARGIN


class InflightLimiter:
    """Counts the adds of one stream that are not yet durable, up to a limit.

    Once ``close()`` is called no slot is granted any more, so a draining
    bookie can wait for ``drained()`` knowing no new add slips in.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._count = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    def try_acquire(self, wanted: int) -> int | None:
        """Take up to ``wanted`` slots; how many were granted, or None once closed."""
        with self._lock:
            if self._closed:
                return None
            granted = max(0, min(wanted, self.limit - self._count))
            self._count += granted
            return granted

    def release(self, count: int) -> None:
        with self._lock:
            self._count -= count

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def drained(self) -> bool:
        """True once closed with nothing in flight."""
        with self._lock:
            return self._closed and self._count == 0
