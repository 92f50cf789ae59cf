"""Bookie statuses and the translation of gRPC transport errors into pyspark_ledger.errors.

A status the bookie decided (FENCED, NO_SUCH_ENTRY, ...) is a value the
replication client acts on; a transport failure (unreachable, deadline,
cancelled, broken stream) is an unknown outcome and becomes a BookieError.
"""
from __future__ import annotations

import enum

import grpc

from pyspark_ledger.client.tls_errors import handshake_failure
from pyspark_ledger.errors import BookieError, BookieUnavailableError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


class BookieStatus(enum.IntEnum):
    """The wire statuses (pyspark_ledger.wire.v1.Status) as a Python enum."""

    STATUS_UNSPECIFIED = pb.STATUS_UNSPECIFIED
    OK = pb.OK
    NO_SUCH_LEDGER = pb.NO_SUCH_LEDGER
    NO_SUCH_ENTRY = pb.NO_SUCH_ENTRY
    FENCED = pb.FENCED
    UNAUTHORIZED = pb.UNAUTHORIZED
    READ_ONLY = pb.READ_ONLY
    TOO_MANY_REQUESTS = pb.TOO_MANY_REQUESTS
    BAD_REQUEST = pb.BAD_REQUEST
    IO_ERROR = pb.IO_ERROR


_STATUSES = {int(status): status for status in BookieStatus}
_UNAVAILABLE = {grpc.StatusCode.UNAVAILABLE: "UNAVAILABLE", grpc.StatusCode.DEADLINE_EXCEEDED: "TIMEOUT",
                grpc.StatusCode.CANCELLED: "CANCELLED"}


def as_status(number: int) -> BookieStatus:
    """The enum member for a wire status; unknown numbers read as STATUS_UNSPECIFIED (an unknown)."""
    return _STATUSES.get(number, BookieStatus.STATUS_UNSPECIFIED)


def translate_rpc_error(exc: grpc.RpcError, bookie_id: str, what: str, tls=None) -> BookieError:
    """The BookieError for a failed RPC; ``what`` names the operation (e.g. 'read of ledger 4').

    ``tls`` (the client's ``ClientTls``, if any) lets a failed TLS handshake be explained as one."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.UNAVAILABLE:
        explained = handshake_failure(bookie_id, tls, details)
        if explained is not None:
            return BookieUnavailableError(f"{what} on bookie {bookie_id} failed: {explained}", bookie_id=bookie_id,
                                          status="UNAVAILABLE")
    if code in _UNAVAILABLE:
        return BookieUnavailableError(f"{what} on bookie {bookie_id} failed: {_UNAVAILABLE[code].lower()}"
                                      f" ({details})", bookie_id=bookie_id, status=_UNAVAILABLE[code])
    name = code.name if code is not None else "UNKNOWN"
    return BookieError(f"{what} on bookie {bookie_id} failed with gRPC {name}: {details}",
                       bookie_id=bookie_id, status=name)
