"""The invariants of docs/protocol.md (I1-I4), checked after every scenario.

Persistence (every confirmed entry is <= the closed end and reads back with
its exact bytes), no divergence (nothing confirmed past the closed end),
agreement and order (two independent readers read the same sequence),
valid fragments (every stored metadata version is a valid successor of the
previous one: first entries strictly increase, none below the current one).
"""
from __future__ import annotations

import threading
from concurrent.futures import Future

from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.protocol.ledger_rules import check_transition


class Confirmed:
    """Records what a writer confirmed: entry id -> payload, and the order of confirmations."""

    def __init__(self) -> None:
        self.entries: dict[int, bytes] = {}
        self.order: list[int] = []
        self._lock = threading.Lock()

    def track(self, future: Future, payload: bytes) -> Future:
        def done(f: Future) -> None:
            if f.exception() is None:
                with self._lock:
                    self.entries[f.result()] = payload
                    self.order.append(f.result())
        future.add_done_callback(done)
        return future

    def append(self, writer, payload: bytes) -> Future:
        return self.track(writer.append_async(payload), payload)


def read_all(client, ledger_id: int, password: bytes) -> list[tuple[int, bytes]]:
    reader = client.open_ledger(ledger_id, password)
    if reader.last_add_confirmed < 0:
        return []
    return [(entry.entry_id, entry.data) for entry in reader.read()]


def check_invariants(client, other_client, store, ledger_id: int, password: bytes,
                     confirmed: Confirmed | None = None) -> list[tuple[int, bytes]]:
    """Assert every invariant for a CLOSED ledger; returns its entries."""
    md = client.ledger_metadata(ledger_id)
    assert md.state == CLOSED, f"ledger {ledger_id} is {md.state}"
    entries = read_all(client, ledger_id, password)
    assert [entry_id for entry_id, _ in entries] == list(range(md.last_entry_id + 1))
    assert read_all(other_client, ledger_id, password) == entries, "two readers disagree"
    assert md.length == sum(len(data) for _, data in entries)
    if confirmed is not None:
        assert max(confirmed.entries, default=-1) <= md.last_entry_id, "a confirmed entry is past the end"
        for entry_id, payload in confirmed.entries.items():
            assert entries[entry_id][1] == payload, f"entry {entry_id} changed"
        assert confirmed.order == sorted(confirmed.order), "confirmations out of entry order"
    history = store.history.get(ledger_id, [])
    for before, after in zip(history, history[1:]):
        check_transition(before, after)
    firsts = [fragment.first_entry_id for fragment in md.fragments]
    assert firsts == sorted(set(firsts)) and firsts[0] == 0
    return entries
