"""The translation of failed gRPC calls into pyspark_ledger.errors.

A status the bookie decided (FENCED, NO_SUCH_ENTRY, ...) is a value the
replication client acts on; a transport failure (unreachable, deadline,
cancelled, broken stream) is an unknown outcome and becomes a BookieError.
Both kinds are ``BookieStatus`` members (``pyspark_ledger.status``, re-exported
here); the exception each one raises is ``pyspark_ledger.errors.STATUS_ERRORS``'s.
"""
from __future__ import annotations

import grpc

from pyspark_ledger.client.tls_errors import handshake_failure
from pyspark_ledger.errors import BookieError, InternalError, error_for_status
from pyspark_ledger.status import BookieStatus, as_status

__all__ = ["BookieStatus", "as_status", "translate_rpc_error"]

#: gRPC codes that mean no answer came; any other code is RPC_FAILED (the message names the code)
_TRANSPORT = {grpc.StatusCode.UNAVAILABLE: BookieStatus.UNAVAILABLE,
              grpc.StatusCode.DEADLINE_EXCEEDED: BookieStatus.TIMEOUT,
              grpc.StatusCode.CANCELLED: BookieStatus.CANCELLED}


def translate_rpc_error(exc: grpc.RpcError, bookie_id: str, what: str, tls=None) -> BookieError:
    """The BookieError for a failed RPC; ``what`` names the operation (e.g. 'read of ledger 4').

    ``tls`` (the client's ``ClientTls``, if any) lets a failed TLS handshake be explained as one."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    status = _TRANSPORT.get(code, BookieStatus.RPC_FAILED)
    explained = handshake_failure(bookie_id, tls, details) if status is BookieStatus.UNAVAILABLE else None
    if explained is not None:
        why = explained
    elif status is BookieStatus.RPC_FAILED:
        why = f"gRPC {code.name if code is not None else 'UNKNOWN'}: {details}"
    else:
        why = f"{status.name.lower()} ({details})"
    error = error_for_status(status, f"{what} on bookie {bookie_id} failed: {why}", bookie_id=bookie_id)
    if not isinstance(error, BookieError):  # pragma: no cover - the registry maps transport conditions to BookieErrors
        raise InternalError(f"status {status.name} of a failed call maps to {type(error).__name__}, not a BookieError")
    return error
