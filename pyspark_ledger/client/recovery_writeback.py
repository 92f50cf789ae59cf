"""Recovery's write-backs over the add streams, in batches (docs/protocol.md R2, R7, R9).

The recovery state machine asks for one ``WriteBack`` per entry it decided present.
``WriteBacks.send`` takes all those of one step, encodes each entry once
(``add_wire.AddEncoder``, the recovery flag set) and hands them to each target
bookie's add stream as one ``send_adds`` call, as the writer does: no future and
no timer per add. A bookie's answers come back as batches; each batch becomes one
event on the recovery thread (``post``) with the acknowledged entries and the
refused ones. A bookie that refuses at once, a broken stream, and an add left
unanswered for ``add_timeout_s`` (one timer per batch) count as that bookie
failing for those entries, as a writer's add would (R7).
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

from pyspark_ledger.client.add_listeners import AddCallbacks
from pyspark_ledger.client.add_wire import AddEncoder
from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.errors import BookieError, LedgerError
from pyspark_ledger.protocol.recovery import LedgerRecovery, WriteBack
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

log = logging.getLogger(__name__)


class WriteBacks:
    """Sends recovery write-backs in batches and turns the answers into state-machine events."""

    def __init__(self, ctx: ClientContext, ledger_id: int, key: bytes, recovery: LedgerRecovery,
                 post: Callable[[Callable[[], tuple]], None]) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._encoder = AddEncoder(ledger_id, key)
        self._recovery = recovery
        self._post = post  # runs a callable on the recovery thread, its actions handled there
        self._listener = AddCallbacks(self._answered, self._stream_failed)
        self._unanswered: dict[str, set[int]] = {}  # touched on the recovery thread only

    def send(self, write_backs: Sequence[WriteBack]) -> None:
        """Send every write-back of one step: one batch per target bookie."""
        batches: dict[str, list[tuple[int, bytes]]] = {}
        for write_back in write_backs:
            frame = self._encoder.encode(write_back.entry_id, write_back.body, recovery=True)
            for bookie in write_back.targets:
                batches.setdefault(bookie, []).append((write_back.entry_id, frame))
        for bookie, adds in batches.items():
            entry_ids = [entry_id for entry_id, _ in adds]
            waiting = self._unanswered.setdefault(bookie, set())
            waiting.update(entry_ids)
            try:
                self._ctx.transport.send_adds(bookie, self._ledger_id, adds, self._listener)
            except LedgerError as exc:
                log.warning("ledger %d: write-back to %s failed: %s", self._ledger_id, bookie, exc)
                self._post(lambda b=bookie, ids=entry_ids: self._failed(b, ids))
                continue
            self._ctx.scheduler.call_later(self._ctx.config.add_timeout_s,
                                           lambda b=bookie, ids=entry_ids: self._post(lambda: self._expired(b, ids)))

    # --- answers (transport threads: post only) ---------------------------------------
    def _answered(self, bookie: str, results: list) -> None:
        self._post(lambda: self._on_results(bookie, results))

    def _stream_failed(self, bookie: str, keys: list[tuple[int, int]], error: BookieError) -> None:
        log.info("ledger %d: write-backs to %s failed: %s", self._ledger_id, bookie, error)
        self._post(lambda: self._failed(bookie, [entry_id for ledger_id, entry_id in keys
                                                 if ledger_id == self._ledger_id]))

    # --- on the recovery thread ---------------------------------------------------------
    def _on_results(self, bookie: str, results: list) -> tuple:
        waiting = self._unanswered.get(bookie, set())
        acked, refused = [], []
        for result in results:
            if result.entry_id not in waiting:
                continue  # already counted (as timed out, for one)
            waiting.discard(result.entry_id)
            (acked if result.status == pb.OK else refused).append(result.entry_id)
            if result.status != pb.OK:
                log.info("ledger %d: write-back of entry %d to %s answered %s %s", self._ledger_id,
                         result.entry_id, bookie, pb.Status.Name(result.status), result.message)
        actions = self._recovery.on_write_back_acks(acked, bookie) if acked else ()
        for entry_id in refused:
            actions += self._recovery.on_write_back_failure(entry_id, bookie)
        return actions

    def _failed(self, bookie: str, entry_ids: list[int]) -> tuple:
        waiting = self._unanswered.get(bookie, set())
        actions: tuple = ()
        for entry_id in entry_ids:
            if entry_id in waiting:
                waiting.discard(entry_id)
                actions += self._recovery.on_write_back_failure(entry_id, bookie)
        return actions

    def _expired(self, bookie: str, entry_ids: list[int]) -> tuple:
        waiting = self._unanswered.get(bookie, set())
        late = [entry_id for entry_id in entry_ids if entry_id in waiting]
        if late:
            log.info("ledger %d: %d write-back(s) to %s got no answer within %s s (from entry %d)", self._ledger_id,
                     len(late), bookie, self._ctx.config.add_timeout_s, late[0])
        return self._failed(bookie, late)
