"""Request limits of the bookie: ids, sizes and counts at the request edge, and the budgets of what it holds.

Every id, count and size of a request is checked where it enters (the
servicer and the add stream) against the bounds below; a check answers with
a message naming what is wrong and the limit (the servicer sends it with a
BAD_REQUEST status), and nothing here raises on malformed input.

Accepted ranges (the wire types are wider):

- ledger id: 0 .. 2^63-1 (uint64 on the wire; the metadata stores, like BookKeeper, use signed 64-bit ids);
- entry id: 0 .. ``MAX_ENTRY_ID`` = 2^39-1 (``pyspark_ledger.entry``; int64 on the wire; writers stop before
  it). A ledger that long holds at least
  2^39 × 40 bytes (header and smallest digest) = 20 TiB on every bookie of its ensemble, beyond any one
  bookie's disk; and every id up to it is storable by the index. LACs (ReadLac's previous_lac, WriteLac)
  are -1 .. ``MAX_ENTRY_ID``;
- master key: at most 64 bytes (the client derives 32-byte keys); a missing key is not malformed but
  unauthorized (``authorization``);
- entry body: the 36-byte header and a 4-byte digest at least, ``--max-entry-size`` at most;
- range read: first .. last within the entry ids, at most ``MAX_READ_ENTRIES`` entries (with ``entry_step``
  > 1, the entries first, first + step, ... counted; the step at most ``MAX_ENTRY_STEP``); ``max_bytes``
  (0 = the server's limit) and a long poll's ``timeout_ms`` are capped at ``MAX_READ_BYTES`` and
  ``MAX_LAC_WAIT_S`` (an answer at the cap is a normal answer; the client repeats);
- adds per AddBatch: ``--max-batch-adds``; bytes per message: ``grpc_max_message_bytes`` (the gRPC
  receive limit refuses a larger message before it is decoded).

``Budget`` counts what the bookie holds or serves at once (bytes of adds not yet durable, open add
streams, waiting long polls, running reads) up to a limit, and refuses at once beyond it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from pyspark_ledger.entry import HEADER_SIZE, MAX_ENTRY_ID, peek_header
from pyspark_ledger.errors import CorruptEntryError

MAX_LEDGER_ID = 2**63 - 1
MAX_MASTER_KEY_BYTES = 64
MIN_BODY_BYTES = HEADER_SIZE + 4     # header and the smallest digest (CRC32C)
MAX_READ_ENTRIES = 65_536           # entries one range read may span
MAX_ENTRY_STEP = 65_536             # distance between the entries of a strided range read
MAX_READ_BYTES = 16 * 1024 * 1024   # a range read stops near this many bytes
MAX_LAC_WAIT_S = 60.0               # longest ReadLac long poll
MAX_FENCE_WAIT_S = 30.0             # longest wait for a fence to become durable
GRPC_MESSAGE_MARGIN = 1024 * 1024   # protobuf framing on top of entry bytes
MAX_INT64 = 2**63 - 1
#: What the bookie holds per admitted add besides its body (decoded request, tuples, journal record,
#: futures, answer), charged to the in-flight byte budgets (docs/measurements.md, "Per-add overhead on a bookie").
ADD_OVERHEAD_BYTES = 640


def _ledger_problem(ledger_id: int) -> str | None:
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        return f"ledger id {ledger_id} is out of range: ledger ids are 0..{MAX_LEDGER_ID} (2^63-1)"
    return None


def _entry_problem(name: str, entry_id: int, ledger_id: int, lowest: int = 0) -> str | None:
    if entry_id < lowest:
        if lowest == 0:
            return f"{name} {entry_id} of ledger {ledger_id} is negative: entry ids start at 0"
        return f"{name} {entry_id} of ledger {ledger_id} is below -1 (-1 means no entry)"
    if entry_id > MAX_ENTRY_ID:
        return (f"{name} {entry_id} of ledger {ledger_id} is over this bookie's limit of {MAX_ENTRY_ID} "
                "(2^39-1) for entry ids")
    return None


def _key_length_problem(master_key: bytes, what: str) -> str | None:
    """A key over the limit is malformed (BAD_REQUEST); a missing one is a matter of authorization
    (``authorization``: UNAUTHORIZED), not of form."""
    if len(master_key) > MAX_MASTER_KEY_BYTES:
        return f"{what} has a master key of {len(master_key)} bytes, over the limit of {MAX_MASTER_KEY_BYTES}"
    return None


def add_is_plain(ledger_id: int, entry_id: int, master_key: bytes, body: bytes, max_entry_size: int) -> bool:
    """The cheap checks of ``check_add`` as one expression (the add stream inlines the same comparisons)."""
    return (MIN_BODY_BYTES <= len(body) <= max_entry_size and 0 <= entry_id <= MAX_ENTRY_ID
            and ledger_id <= MAX_LEDGER_ID and 0 < len(master_key) <= MAX_MASTER_KEY_BYTES)


def check_add(ledger_id: int, entry_id: int, master_key: bytes, body: bytes, max_entry_size: int) -> str | None:
    """A message saying why an add is malformed, or None when it may go to storage.

    Only the cheap checks run here; the header is checked by storage, and
    ``explain_bad_add`` says why when storage answers BAD_REQUEST.
    """
    problem = _ledger_problem(ledger_id) or _entry_problem("entry id", entry_id, ledger_id)
    if problem is not None:
        return problem
    if len(body) > max_entry_size:
        return (f"entry {entry_id} of ledger {ledger_id} is {len(body)} bytes, over this bookie's "
                f"max entry size of {max_entry_size} bytes: split it or raise --max-entry-size")
    if len(body) < MIN_BODY_BYTES:
        return (f"entry {entry_id} of ledger {ledger_id} is {len(body)} bytes, shorter than the smallest "
                f"encoded entry ({MIN_BODY_BYTES} bytes: header and digest)")
    return _key_length_problem(master_key, f"add to ledger {ledger_id} entry {entry_id}")


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


def check_batch(add_count: int, max_batch_adds: int) -> str | None:
    """Why an AddBatch is refused as a whole (too many adds), or None."""
    if add_count > max_batch_adds:
        return (f"an AddBatch of {add_count} adds is over this bookie's limit of {max_batch_adds} adds per "
                "batch (--max-batch-adds): send smaller batches")
    return None


def check_read(first_entry_id: int, last_entry_id: int, ledger_id: int = 0, master_key: bytes = b"",
               entry_step: int = 0) -> str | None:
    """A message saying why a read request is malformed, or None (``entry_step`` 0 or 1: every entry)."""
    problem = (_ledger_problem(ledger_id) or _entry_problem("first_entry_id", first_entry_id, ledger_id)
               or _entry_problem("last_entry_id", last_entry_id, ledger_id, lowest=-1))
    if problem is not None:
        return problem
    if last_entry_id < first_entry_id:
        return (f"last_entry_id {last_entry_id} is below first_entry_id {first_entry_id}: "
                "use first == last for one entry")
    if entry_step > MAX_ENTRY_STEP:
        return (f"entry_step {entry_step} of a read of ledger {ledger_id} is over the limit of {MAX_ENTRY_STEP} "
                "(the distance between the entries read)")
    step = max(entry_step, 1)
    span = (last_entry_id - first_entry_id) // step + 1
    if span > MAX_READ_ENTRIES:
        steps = "" if step == 1 else f" in steps of {step}"
        return (f"a read of {span} entries ({first_entry_id}..{last_entry_id}{steps}) of ledger {ledger_id} is over "
                f"the limit of {MAX_READ_ENTRIES} entries per read: read in smaller ranges")
    return _key_length_problem(master_key, f"read of ledger {ledger_id}")


def check_read_lac(ledger_id: int, has_previous: bool, previous_lac: int, master_key: bytes = b"") -> str | None:
    """Why a ReadLac request is malformed, or None (its timeout is capped, see ``lac_wait_seconds``)."""
    problem = _ledger_problem(ledger_id) or _key_length_problem(master_key, f"read_lac of ledger {ledger_id}")
    if problem is None and has_previous:
        problem = _entry_problem("previous_lac", previous_lac, ledger_id, lowest=-1)
    return problem


def check_write_lac(ledger_id: int, master_key: bytes, last_add_confirmed: int) -> str | None:
    """Why a WriteLac request is malformed, or None."""
    return (_ledger_problem(ledger_id)
            or _key_length_problem(master_key, f"write_lac of ledger {ledger_id}")
            or _entry_problem("last_add_confirmed", last_add_confirmed, ledger_id, lowest=-1))


def read_byte_budget(requested: int) -> int:
    """The bytes a range read may return: the request's max_bytes, capped by the server."""
    if requested <= 0:
        return MAX_READ_BYTES
    return min(requested, MAX_READ_BYTES)


def lac_wait_seconds(timeout_ms: int) -> float:
    """A long poll's wait, capped at MAX_LAC_WAIT_S."""
    return min(max(timeout_ms, 0) / 1000.0, MAX_LAC_WAIT_S)


def grpc_max_message_bytes(max_entry_size: int, max_batch_bytes: int) -> int:
    """The gRPC receive limit: one batch of the client's size, or one entry of the largest size, plus framing.

    Entries a little over ``max_entry_size`` still reach the servicer and get a BAD_REQUEST naming the
    limit; a message over this gets gRPC's RESOURCE_EXHAUSTED before it is decoded.
    """
    return max(max_batch_bytes, max_entry_size) + GRPC_MESSAGE_MARGIN


def add_cost(body_bytes: int, adds: int) -> int:
    """What a batch of adds is charged against the in-flight byte budgets."""
    return body_bytes + adds * ADD_OVERHEAD_BYTES


def arriving_frames_bytes(max_inflight_bytes: int, max_frame_bytes: int) -> int:
    """How many bytes the framed port may allocate at once for large frames of which less than half arrived: a
    quarter of ``--max-inflight-bytes``, and at least one frame of the largest size (past it, such a frame waits
    for half of its bytes, as before: slower, never refused)."""
    return max(max_frame_bytes, max_inflight_bytes // 4)


class Budget:
    """A count of something held at once (bytes, calls), granted up to ``limit`` and refused beyond it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self.peak = 0  # highest use since the last ``take_peak``
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def try_take(self, amount: int) -> bool:
        """Take ``amount`` if it fits under the limit (all or nothing)."""
        with self._lock:
            used = self._used + amount
            if used > self.limit:
                return False
            self._used = used
            if used > self.peak:
                self.peak = used
            return True

    def give_back(self, amount: int) -> int:
        """Return ``amount``; the use left."""
        with self._lock:
            self._used -= amount
            return self._used

    def take_peak(self) -> int:
        """The highest use since the last call, resetting it to the current use."""
        with self._lock:
            peak, self.peak = self.peak, self._used
            return peak


def refusal_over_budget(what: str, limit: int, flag: str, unit: str = "") -> str:
    """The message of an immediate refusal past a bookie-wide limit."""
    return (f"this bookie is at its limit of {limit}{unit} {what} ({flag}): refused at once, retry later or "
            "elsewhere")


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


@dataclass(frozen=True)
class StreamLimits:
    """The limits of one add stream (from the bookie's flags)."""

    max_entry_size: int
    max_inflight_adds: int = 10_000
    max_batch_adds: int = 65_536
    max_stream_inflight_bytes: int = 64 * 1024 * 1024
    idle_timeout_s: float = 0.0  # 0 = never
    answer_runs: bool = True  # OK answers as runs to a client that asks (docs/protocol.md W9)


class BookieBudgets:
    """What the whole bookie serves or holds at once: each a ``Budget`` with the flag that sets it."""

    def __init__(self, *, inflight_bytes: int, add_streams: int, long_polls: int, reads: int) -> None:
        self.inflight_bytes = Budget(inflight_bytes)
        self.add_streams = Budget(add_streams)
        self.long_polls = Budget(long_polls)
        self.reads = Budget(reads)
