"""The message of an add the bookie's storage did not take: what a client reads beside the status, and the log
line that counts a storage batch's refusals."""
from __future__ import annotations

import logging

from bookie_server.authorization import wrong_key
from bookie_server.limits import explain_bad_add
from bookie_server.metrics import STATUS_NAMES
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

_log = logging.getLogger("bookie_server.add_stream")  # where an add stream's refusals were always logged


def describe_refusal(ledger_id: int, entry_id: int, master_key: bytes, body, status: int, bookie_id: str,
                     read_only: str | None) -> str:
    """Why this add was answered ``status`` (not OK), naming the ledger, the entry and this bookie."""
    where = f"ledger {ledger_id} entry {entry_id}"
    if status == pb.BAD_REQUEST:
        return explain_bad_add(ledger_id, entry_id, master_key, body)
    if status == pb.FENCED:
        return f"ledger {ledger_id} is fenced on bookie {bookie_id}: {where} was not added"
    if status == pb.UNAUTHORIZED:
        return f"{wrong_key('add', ledger_id)} ({where} was not added)"
    if status == pb.READ_ONLY:
        return f"bookie {bookie_id} is read-only ({read_only or 'not taking adds'}): {where} was not added"
    if status == pb.IO_ERROR:
        return (f"bookie {bookie_id} could not store {where} (its storage or this ledger's index failed; "
                "the bookie's log says which): outcome unknown")
    return f"{where}: {STATUS_NAMES.get(status, status)}"


def log_storage_refusals(peer: str, ops: list[tuple], statuses: list[int]) -> None:
    """One INFO line for the adds of a storage batch that were not OK: how many, from whom, and the first."""
    refused = [(op, status) for op, status in zip(ops, statuses) if status != pb.OK]
    if refused:
        op, status = refused[0]
        _log.info("storage refused %d add(s) from %s, first: ledger %d entry %d %s", len(refused), peer,
                  op[0], op[1], STATUS_NAMES.get(status, status))
