"""The checks of each add of a received batch, before admission: ``sort_adds`` turns the adds into plain tuples
the storage takes, and the rest into refusals that say why (docs/protocol.md K1 for the key).

An add is plain when its body's size is within the bookie's limits, its ids are in range and it carries a master
key of an allowed length; the comparisons of ``limits.check_add`` are inlined for those (this loop runs once per
entry), and ``check_add`` runs only to explain a refusal. A well-formed add without a key is refused UNAUTHORIZED,
except an administrator's recovery write-back of a ledger this bookie stores, which takes the stored key
(``admin_key``)."""
from __future__ import annotations

from typing import Callable, Sequence

from bookie_server.authorization import missing_key
from bookie_server.limits import MAX_ENTRY_ID, MAX_LEDGER_ID, MAX_MASTER_KEY_BYTES, MIN_BODY_BYTES, check_add
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


def sort_adds(adds: Sequence, max_size: int, admin_key: Callable[[int], bytes | None]
              ) -> tuple[list[tuple], list[tuple[int, int, int, str]], int]:
    """``(ops, refused, size)``: the plain adds as ``(ledger id, entry id, master key, body, recovery)`` tuples in
    their order, the refusals as ``(ledger id, entry id, status, message)``, and the bytes of the plain adds' bodies.
    ``admin_key(ledger_id)`` is the stored key for a key-less recovery add of the stream's administrator, else
    None."""
    ops: list[tuple] = []
    refused: list[tuple[int, int, int, str]] = []
    take = ops.append
    size = 0
    for add in adds:
        ledger_id, entry_id, master_key, body = add.ledger_id, add.entry_id, add.master_key, add.body
        length = len(body)
        if (MIN_BODY_BYTES <= length <= max_size and 0 <= entry_id <= MAX_ENTRY_ID
                and ledger_id <= MAX_LEDGER_ID and 0 < len(master_key) <= MAX_MASTER_KEY_BYTES):
            take((ledger_id, entry_id, master_key, body, add.recovery))
            size += length
            continue
        problem = check_add(ledger_id, entry_id, master_key, body, max_size)
        if problem is not None:
            refused.append((ledger_id, entry_id, pb.BAD_REQUEST, problem))
            continue
        key = admin_key(ledger_id) if add.recovery else None  # well formed but without a key
        if key is None:
            refused.append((ledger_id, entry_id, pb.UNAUTHORIZED, missing_key("add", ledger_id)))
        else:
            take((ledger_id, entry_id, key, body, True))
            size += length
    return ops, refused, size
