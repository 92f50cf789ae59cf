"""Writers of a Jepsen-style run: threads that create ledgers and append to them, recording every operation.

A ``WriterWorker`` loops until stopped: create a ledger (E, Qw, Qa of the run), append up to
``entries_per_ledger`` payloads with at most ``inflight`` adds unconfirmed, close it, start the next.
Every create, add and close goes into the run's ``History``: an add is ``ok`` with its entry id once
confirmed; an add that fails after it was handed to the writer is ``unknown`` (it may have reached
bookies, and recovery may keep it), one refused before that is ``fail``. A writer that fails (fenced,
no bookies) is abandoned: its ledger is left to recovery, and the worker starts a new one.
With ``abandon_at_stop`` the worker's last ledger is left OPEN once its adds are answered (a writer that
died), for recovery to close. Payloads name their writer, ledger and sequence number, so no two are alike.
"""
from __future__ import annotations

import random
import threading
import time

from pyspark_ledger.errors import LedgerError
from pyspark_ledger.testing.jepsen.history import History

PASSWORD = b"jepsen"
RETRY_PAUSE_S = 0.2


def payload(rng: random.Random, name: str, ledger_id: int, sequence: int, size: int) -> bytes:
    head = f"{name}:{ledger_id}:{sequence}:".encode()
    return head + rng.randbytes(max(0, size - len(head)))


class WriterWorker(threading.Thread):
    """One writer thread (see the module docstring)."""

    def __init__(self, name: str, client, history: History, stop: threading.Event, *, seed: int,
                 quorums: tuple[int, int, int] = (3, 3, 2), entries_per_ledger: int = 200, inflight: int = 16,
                 payload_bytes: int = 200, pace_s: float = 0.005, abandon_at_stop: bool = False) -> None:
        super().__init__(name=f"jepsen-{name}", daemon=True)
        self.label = name
        self.client = client
        self.history = history
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.quorums = quorums
        self.entries_per_ledger = entries_per_ledger
        self.inflight = inflight
        self.slots = threading.BoundedSemaphore(inflight)
        self.abandon_at_stop = abandon_at_stop
        self.payload_bytes = payload_bytes
        self.pace_s = pace_s
        self.ledgers: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                writer = self._create()
                if writer is not None:
                    self._fill(writer)
        except BaseException as exc:  # noqa: BLE001 - reported by the runner
            self.error = exc

    def _create(self):
        ensemble, write_quorum, ack_quorum = self.quorums
        op = self.history.invoke(self.label, "create")
        try:
            writer = self.client.create_ledger(ensemble, write_quorum, ack_quorum, password=PASSWORD)
        except LedgerError as exc:
            self.history.unknown(op, exc)
            self.stop_event.wait(RETRY_PAUSE_S)
            return None
        self.history.ok(op, ledger_id=writer.ledger_id)
        self.ledgers.append(writer.ledger_id)
        return writer

    def _fill(self, writer) -> None:
        broken = threading.Event()
        for sequence in range(self.entries_per_ledger):
            if self.stop_event.is_set() or broken.is_set():
                break
            while not self.slots.acquire(timeout=0.1):
                if self.stop_event.is_set() or broken.is_set():
                    break
            else:
                self._add(writer, sequence, broken)
                if self.pace_s:
                    time.sleep(self.pace_s)
                continue
            break
        if broken.is_set():
            writer.abort("the jepsen writer gave this ledger up after a failed add")
            return
        if self.abandon_at_stop and self.stop_event.is_set():
            self._abandon(writer)
            return
        op = self.history.invoke(self.label, "close", writer.ledger_id)
        try:
            writer.close()
            self.history.ok(op)
        except LedgerError as exc:
            self.history.unknown(op, exc)

    def _abandon(self, writer) -> None:
        """Die as a writer whose every add was answered: wait for them, then leave the ledger OPEN, so that
        recovery must close it exactly at the last acknowledged entry."""
        taken = sum(self.slots.acquire(timeout=30) for _ in range(self.inflight))
        for _ in range(taken):
            self.slots.release()
        writer.abort("the jepsen writer died (on purpose) with every add answered")

    def _add(self, writer, sequence: int, broken: threading.Event) -> None:
        data = payload(self.rng, self.label, writer.ledger_id, sequence, self.payload_bytes)
        op = self.history.invoke(self.label, "add", writer.ledger_id, data)
        try:
            future = writer.append_async(data)
        except LedgerError as exc:
            self.slots.release()
            self.history.fail(op, exc)
            broken.set()
            return

        def done(completed) -> None:
            self.slots.release()
            error = completed.exception()
            if error is None:
                self.history.ok(op, entry_id=completed.result())
            else:
                self.history.unknown(op, error)
                broken.set()
        future.add_done_callback(done)
