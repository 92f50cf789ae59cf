"""Add answers as runs of acknowledged entry ids (docs/protocol.md W9): the negotiation and the runs.

A client that understands runs opens its AddStream with the gRPC metadata ``ANSWERS_KEY: ANSWERS_AS_RUNS``.
A bookie that sees it answers every OK add inside an ``AckRun`` (ledger id, first and last entry id) of
``AddResultBatch.acked`` instead of one ``AddResult`` each; any other answer keeps its ``AddResult``. The
answers of one message are its runs, in order, then its results, in order: a server whose answers hold
an OK after a non-OK one starts a new message for it, so the order of every answer is kept.

``RunBuilder`` makes the messages of one batch of answers on the server side (the bookie's and the
benchmark's no-op servers'): an all-OK batch of consecutive ids of one ledger (what one writer sends) is
one run, checked with C-level list operations, and a run continues across batches when the ids do.
"""
from __future__ import annotations

from typing import Iterable

from pyspark_ledger.wire.v1 import bookie_pb2 as pb

ANSWERS_KEY = "ledger-add-answers"  # gRPC metadata keys are lower case
ANSWERS_AS_RUNS = "runs"
ASK_FOR_RUNS = ((ANSWERS_KEY, ANSWERS_AS_RUNS),)


def asks_for_runs(metadata: Iterable | None) -> bool:
    """Whether a call's invocation metadata (``(key, value)`` pairs) asks for answers as runs."""
    for key, value in metadata or ():
        if key == ANSWERS_KEY and value == ANSWERS_AS_RUNS:
            return True
    return False


class RunBuilder:
    """The AddResultBatch messages of a sequence of answers, OK ones as runs (see the module docstring)."""

    __slots__ = ("_messages", "_runs", "_results")

    def __init__(self) -> None:
        self._messages: list[pb.AddResultBatch] = []
        self._runs: list[list[int]] = []  # [ledger id, first, last] of the message being built
        self._results: list[tuple[int, int, int, str]] = []

    def acked(self, ledger_ids: list[int], entry_ids: list[int]) -> None:
        """OK answers to these adds (equal-length lists), in this order."""
        count = len(entry_ids)
        if not count:
            return
        if self._results:  # an OK after a non-OK: a new message keeps the order
            self._close()
        ledger_id, first = ledger_ids[0], entry_ids[0]
        if ledger_ids.count(ledger_id) == count and entry_ids == list(range(first, first + count)):
            self._extend(ledger_id, first, first + count - 1)  # one run: nearly always
            return
        for ledger_id, entry_id in zip(ledger_ids, entry_ids):
            self._extend(ledger_id, entry_id, entry_id)

    def refused(self, ledger_id: int, entry_id: int, status: int, message: str) -> None:
        """A non-OK answer (it follows every answer given before it)."""
        self._results.append((ledger_id, entry_id, status, message))

    def messages(self) -> list[pb.AddResultBatch]:
        """The messages of every answer given so far (the builder is empty afterwards)."""
        self._close()
        messages, self._messages = self._messages, []
        return messages

    def _extend(self, ledger_id: int, first: int, last: int) -> None:
        runs = self._runs
        if runs:
            run = runs[-1]
            if run[2] + 1 == first and run[0] == ledger_id:
                run[2] = last
                return
        runs.append([ledger_id, first, last])

    def _close(self) -> None:
        if not self._runs and not self._results:
            return
        message = pb.AddResultBatch()
        add_run, add_result = message.acked.add, message.results.add
        for ledger_id, first, last in self._runs:
            run = add_run()
            run.ledger_id, run.first_entry_id, run.last_entry_id = ledger_id, first, last
        for ledger_id, entry_id, status, text in self._results:
            add_result(ledger_id=ledger_id, entry_id=entry_id, status=status, message=text)
        self._messages.append(message)
        self._runs, self._results = [], []


class PerAddBuilder:
    """``RunBuilder``'s interface for a client that did not ask for runs: one ``AddResult`` per answer, in order,
    all in one message (none when there is no answer)."""

    __slots__ = ("_message",)

    def __init__(self) -> None:
        self._message = pb.AddResultBatch()

    def acked(self, ledger_ids: list[int], entry_ids: list[int]) -> None:
        add_result, ok = self._message.results.add, pb.OK
        for ledger_id, entry_id in zip(ledger_ids, entry_ids):  # fields one by one: twice as fast as keywords
            result = add_result()
            result.ledger_id, result.entry_id, result.status = ledger_id, entry_id, ok

    def refused(self, ledger_id: int, entry_id: int, status: int, message: str) -> None:
        self._message.results.add(ledger_id=ledger_id, entry_id=entry_id, status=status, message=message)

    def messages(self) -> list[pb.AddResultBatch]:
        message, self._message = self._message, pb.AddResultBatch()
        return [message] if message.results else []
