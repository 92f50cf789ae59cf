"""One in-memory bookie: the statuses of ``bookie_server`` for adds, fences, reads and LAC reads.

Requests and answers are serialized protobuf messages (``bookie.proto``).
Like the real bookie it reads the ledger id, entry id and LAC from the
entry's header and stores the body as opaque bytes; a fence creates an
unknown ledger fenced (docs/protocol.md F4); an add with another master key is UNAUTHORIZED
and a plain add to a fenced ledger is FENCED. Like the real bookie it
authorizes every operation (``bookie_server.authorization``): an add, read,
fence, LAC read or LAC write without the ledger's master key, or with another
one, is UNAUTHORIZED and its answer carries no ledger state, so a client that
forgets the key fails its tests. Not thread-safe: only the fake network's
thread calls it.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from pyspark_ledger.entry import peek_header
from pyspark_ledger.errors import CorruptEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

MAX_READ_BYTES = 16 * 1024 * 1024


@dataclass
class FakeLedger:
    master_key: bytes
    fenced: bool = False
    last_add_confirmed: int = -1
    last_entry_id: int = -1
    entries: dict[int, bytes] = field(default_factory=dict)


class FakeBookie:
    """The storage and request handling of one fake bookie."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id
        self.ledgers: dict[int, FakeLedger] = {}
        self.read_only = False

    # --- inspection (tests) ---------------------------------------------------
    def has_entry(self, ledger_id: int, entry_id: int) -> bool:
        ledger = self.ledgers.get(ledger_id)
        return ledger is not None and entry_id in ledger.entries

    def is_fenced(self, ledger_id: int) -> bool:
        ledger = self.ledgers.get(ledger_id)
        return ledger is not None and ledger.fenced

    def corrupt(self, ledger_id: int, entry_id: int) -> None:
        """Flip the last byte of a stored entry (its payload, or its digest if the payload is empty)."""
        body = bytearray(self.ledgers[ledger_id].entries[entry_id])
        body[-1] ^= 0xFF
        self.ledgers[ledger_id].entries[entry_id] = bytes(body)

    # --- adds -----------------------------------------------------------------
    def handle_add(self, data: bytes) -> tuple[bytes, bool]:
        """Answer a serialized AddRequest; also says whether the ledger's LAC went up."""
        request = pb.AddRequest.FromString(data)
        status, message, advanced = self._add(request)
        result = pb.AddResult(ledger_id=request.ledger_id, entry_id=request.entry_id, status=status,
                              message=message)
        return result.SerializeToString(), advanced

    def _add(self, request: pb.AddRequest) -> tuple[int, str, bool]:
        if self.read_only:
            return pb.READ_ONLY, f"bookie {self.bookie_id} is read-only", False
        if not request.master_key:
            return pb.UNAUTHORIZED, f"an add to ledger {request.ledger_id} needs its master key", False
        try:
            header = peek_header(request.body)
        except CorruptEntryError as exc:
            return pb.BAD_REQUEST, f"body is not an encoded entry: {exc}", False
        if (header.ledger_id, header.entry_id) != (request.ledger_id, request.entry_id):
            return pb.BAD_REQUEST, "body header does not name the requested ledger and entry", False
        ledger = self.ledgers.get(request.ledger_id)
        if ledger is None:
            ledger = self.ledgers[request.ledger_id] = FakeLedger(request.master_key)
        elif not hmac.compare_digest(ledger.master_key, request.master_key):
            return pb.UNAUTHORIZED, "master key does not match", False
        elif ledger.fenced and not request.recovery:
            return pb.FENCED, f"ledger {request.ledger_id} is fenced", False
        ledger.entries[request.entry_id] = request.body
        ledger.last_entry_id = max(ledger.last_entry_id, request.entry_id)
        advanced = header.last_add_confirmed > ledger.last_add_confirmed
        ledger.last_add_confirmed = max(ledger.last_add_confirmed, header.last_add_confirmed)
        return pb.OK, "", advanced

    # --- reads ----------------------------------------------------------------
    def handle_read(self, data: bytes) -> bytes:
        request = pb.ReadRequest.FromString(data)
        response = self._read(request)
        if response.status != pb.UNAUTHORIZED:
            self._fill_view(response, request.ledger_id)
        else:
            response.last_add_confirmed = response.last_entry_id = -1
        return response.SerializeToString()

    def refusal(self, ledger_id: int, master_key: bytes) -> str | None:
        """Why a request with ``master_key`` is refused UNAUTHORIZED (missing, or not the stored one), else
        None (an unknown ledger passes: NO_SUCH_LEDGER, or a fence's F4, decides next)."""
        if not master_key:
            return f"ledger {ledger_id} needs its master key"
        ledger = self.ledgers.get(ledger_id)
        if ledger is not None and not hmac.compare_digest(ledger.master_key, master_key):
            return f"master key does not match ledger {ledger_id}"
        return None

    def _read(self, request: pb.ReadRequest) -> pb.ReadResponse:
        first, last = request.first_entry_id, request.last_entry_id
        if first < 0 or last < first:
            return pb.ReadResponse(status=pb.BAD_REQUEST, message=f"bad range {first}..{last}")
        ledger = self.ledgers.get(request.ledger_id)
        refusal = self.refusal(request.ledger_id, request.master_key)
        if refusal is not None:
            return pb.ReadResponse(status=pb.UNAUTHORIZED, message=refusal)
        if request.fence:
            if ledger is None:
                ledger = self.ledgers[request.ledger_id] = FakeLedger(request.master_key)
            ledger.fenced = True
        if ledger is None:
            return pb.ReadResponse(status=pb.NO_SUCH_LEDGER, message=f"no ledger {request.ledger_id}")
        entry_ids = range(first, last + 1, max(request.entry_step, 1))
        return _entries(ledger, entry_ids, request.max_bytes or MAX_READ_BYTES)

    def handle_read_lac(self, data: bytes) -> tuple[bytes, pb.ReadLacRequest | None]:
        """The answer and the parsed request; None instead of the request when it was refused (no waiting)."""
        request = pb.ReadLacRequest.FromString(data)
        refusal = self.refusal(request.ledger_id, request.master_key)
        if refusal is not None:
            return pb.ReadLacResponse(status=pb.UNAUTHORIZED, message=refusal, last_add_confirmed=-1,
                                      last_entry_id=-1).SerializeToString(), None
        return self.lac_answer(request.ledger_id), request

    def lac_answer(self, ledger_id: int) -> bytes:
        if ledger_id not in self.ledgers:
            response = pb.ReadLacResponse(status=pb.NO_SUCH_LEDGER, message=f"no ledger {ledger_id}")
        else:
            response = pb.ReadLacResponse(status=pb.OK)
        self._fill_view(response, ledger_id)
        return response.SerializeToString()

    def last_add_confirmed(self, ledger_id: int) -> int:
        ledger = self.ledgers.get(ledger_id)
        return -1 if ledger is None else ledger.last_add_confirmed

    def _fill_view(self, response, ledger_id: int) -> None:
        ledger = self.ledgers.get(ledger_id)
        response.last_add_confirmed = -1 if ledger is None else ledger.last_add_confirmed
        response.last_entry_id = -1 if ledger is None else ledger.last_entry_id
        response.fenced = ledger is not None and ledger.fenced


def _entries(ledger: FakeLedger, entry_ids: range, budget: int) -> pb.ReadResponse:
    response = pb.ReadResponse(status=pb.OK)
    total = 0
    for entry_id in entry_ids:
        body = ledger.entries.get(entry_id)
        if body is None:
            if not response.entries:
                response.status, response.message = pb.NO_SUCH_ENTRY, f"no entry {entry_id}"
            break
        if response.entries and total + len(body) > budget:
            break
        response.entries.add(entry_id=entry_id, body=body)
        total += len(body)
        if total >= budget:
            break
    return response
