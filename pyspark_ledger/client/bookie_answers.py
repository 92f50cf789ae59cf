"""What a bookie's unary calls answer, as the client's own result types: a read, the LAC, an explicit LAC's
write, the bookie's info (``BookieClient`` builds them from the protobuf answers; the transports and the fake
bookies hand them on)."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark_ledger.status import BookieStatus, as_status
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


@dataclass(frozen=True, slots=True)
class ReadResult:
    status: BookieStatus
    message: str
    entries: tuple[tuple[int, bytes | memoryview], ...]   # (entry_id, body) in entry order; large bodies are
    # read-only views of the answer's bytes (client/read_wire.py)
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool

    @property
    def ok(self) -> bool:
        return self.status == BookieStatus.OK


@dataclass(frozen=True, slots=True)
class LacResult:
    status: BookieStatus
    message: str
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool


@dataclass(frozen=True, slots=True)
class WriteLacResult:
    status: BookieStatus
    message: str
    last_add_confirmed: int   # the bookie's LAC for the ledger after the write
    fenced: bool

    @property
    def ok(self) -> bool:
        return self.status == BookieStatus.OK


@dataclass(frozen=True, slots=True)
class BookieInfo:
    status: BookieStatus
    bookie_id: str
    free_bytes: int
    total_bytes: int
    read_only: bool
    version: str
    max_entry_bytes: int


def read_result(response: pb.ReadResponse) -> ReadResult:
    return ReadResult(as_status(response.status), response.message,
                      tuple((entry.entry_id, entry.body) for entry in response.entries),
                      response.last_add_confirmed, response.last_entry_id, response.fenced)


def lac_result(response: pb.ReadLacResponse) -> LacResult:
    return LacResult(as_status(response.status), response.message, response.last_add_confirmed,
                     response.last_entry_id, response.fenced)


def write_lac_result(response: pb.WriteLacResponse) -> WriteLacResult:
    return WriteLacResult(as_status(response.status), response.message, response.last_add_confirmed,
                          response.fenced)


def bookie_info(response: pb.BookieInfoResponse) -> BookieInfo:
    return BookieInfo(as_status(response.status), response.bookie_id, response.free_bytes, response.total_bytes,
                      response.read_only, response.version, response.max_entry_bytes)
