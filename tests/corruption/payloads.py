"""Entry payloads that name their ledger and entry, so that any mix-up or damage shows."""
from __future__ import annotations

import hashlib

PASSWORD = b"corruption"


def payload(ledger_id: int, entry_id: int, size: int = 300) -> bytes:
    seed = hashlib.sha256(b"%d/%d" % (ledger_id, entry_id)).digest()
    head = b"ledger %d entry %d " % (ledger_id, entry_id)
    return (head + seed * (size // len(seed) + 1))[:size]
