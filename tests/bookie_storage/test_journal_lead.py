"""A submitter leads the commit of an idle journal (docs/protocol.md B1): it writes and fsyncs on its own thread,
one group at a time, in queue order, and never while the journal thread or another leader commits."""
from __future__ import annotations

import threading
import time

import pytest

from bookie_server.journal import LEAD, Journal
from bookie_server.journal_format import encode_fence
from bookie_server.storage import StorageConfig
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from bookie_server.storage import AddOp
from tests.bookie_storage.entries import CODEC, KEY

WAIT_S = 30


class Calls:
    """Callbacks that note (name, durable, thread name), in the order they ran."""

    def __init__(self) -> None:
        self.done: list[tuple[str, bool, str]] = []
        self._lock = threading.Lock()

    def callback(self, name: str):
        def called(durable: bool) -> None:
            with self._lock:
                self.done.append((name, durable, threading.current_thread().name))
        return called


class Gate:
    """A ``before_write`` that holds whichever thread commits a ``sync_first`` group until ``open()``."""

    def __init__(self) -> None:
        self.held, self._open = threading.Event(), threading.Event()
        self.threads: list[str] = []

    def __call__(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.held.set()
        assert self._open.wait(WAIT_S)

    def open(self) -> None:
        self._open.set()


def make_journal(tmp_path, before_write=None, **settings) -> Journal:
    config = StorageConfig(tmp_path, **{"journal_max_wait_ms": 0, **settings})
    config.journal_dir.mkdir(parents=True)
    return Journal(config, 1, before_write=before_write)


def record(ledger_id: int) -> bytes:
    return encode_fence(ledger_id, KEY)


def submit(journal: Journal, calls: Calls, name: str, ledger_id: int, **options):
    chunk = record(ledger_id)
    return journal.submit([chunk], len(chunk), 1, calls.callback(name), **options)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_an_idle_journal_is_committed_by_the_thread_that_submitted(tmp_path):
    journal, calls = make_journal(tmp_path), Calls()
    try:
        assert submit(journal, calls, "a", 1, sync_first=False, lead=True) is LEAD
        assert calls.done == [] and journal.durable_position()[1] == 0  # nothing written until it leads
        journal.lead()
        assert calls.done == [("a", True, threading.current_thread().name)]
        assert journal.durable_position()[1] == 1
        assert submit(journal, calls, "b", 2, sync_first=False) is True  # not asked to lead: the journal thread
        wait_until(lambda: len(calls.done) == 2, "the journal thread did not commit b")
        assert calls.done[1] == ("b", True, "bookie-journal")
    finally:
        journal.close()


def test_a_busy_journal_keeps_a_would_be_leaders_submission(tmp_path):
    gate, calls = Gate(), Calls()
    journal = make_journal(tmp_path, before_write=gate)
    try:
        assert submit(journal, calls, "first", 1) is True  # sync_first: held in before_write, on the journal thread
        assert gate.held.wait(WAIT_S)
        assert submit(journal, calls, "second", 2, sync_first=False, lead=True) is True  # not LEAD: it is busy
        gate.open()
        wait_until(lambda: len(calls.done) == 2, "the journal thread did not commit both")
        assert calls.done == [("first", True, "bookie-journal"), ("second", True, "bookie-journal")]
        assert gate.threads == ["bookie-journal"]
    finally:
        gate.open()
        journal.close()


def test_what_is_submitted_while_a_leader_commits_waits_for_it_then_goes_in_order(tmp_path):
    gate, calls = Gate(), Calls()
    journal = make_journal(tmp_path, before_write=gate)
    try:
        def lead_one() -> None:
            assert submit(journal, calls, "led", 1, lead=True) is LEAD  # sync_first: held in before_write
            journal.lead()
        leader = threading.Thread(target=lead_one, name="leader")
        leader.start()
        assert gate.held.wait(WAIT_S)
        assert submit(journal, calls, "next", 2, sync_first=False, lead=True) is True
        assert submit(journal, calls, "last", 3, sync_first=False) is True
        time.sleep(0.2)  # the journal thread was woken for them, but a leader is committing
        assert calls.done == [] and journal.durable_position()[1] == 0
        gate.open()
        leader.join(WAIT_S)
        wait_until(lambda: len(calls.done) == 3, "the queued submissions were not committed")
        assert calls.done[0] == ("led", True, "leader")
        assert [(name, durable) for name, durable, _ in calls.done] == [("led", True), ("next", True), ("last", True)]
        assert {thread for _, _, thread in calls.done[1:]} == {"bookie-journal"}
        assert journal.durable_position()[1] == 3
    finally:
        gate.open()
        journal.close()


def test_no_one_leads_when_a_group_wait_is_configured(tmp_path):
    journal, calls = make_journal(tmp_path, journal_max_wait_ms=2), Calls()
    try:
        assert submit(journal, calls, "a", 1, sync_first=False, lead=True) is True
        wait_until(lambda: calls.done, "the journal thread did not commit")
        assert calls.done == [("a", True, "bookie-journal")]
    finally:
        journal.close()


def test_close_waits_for_a_leaders_commit(tmp_path):
    gate, calls = Gate(), Calls()
    journal = make_journal(tmp_path, before_write=gate)
    leader = threading.Thread(target=lambda: (submit(journal, calls, "led", 1, lead=True), journal.lead()),
                              name="leader")
    leader.start()
    assert gate.held.wait(WAIT_S)
    closer = threading.Thread(target=journal.close)
    closer.start()
    time.sleep(0.2)
    assert closer.is_alive()  # the journal thread waits for the leader before it stops and the file is closed
    gate.open()
    leader.join(WAIT_S)
    closer.join(WAIT_S)
    assert not closer.is_alive() and calls.done == [("led", True, "leader")]
    assert journal.submit([record(2)], len(record(2)), 1, calls.callback("late"), lead=True) is False


@pytest.mark.parametrize("size, thread", [(1024, "adding"), (64 * 1024, "bookie-journal")])
def test_inline_adds_to_an_idle_storage_are_answered_on_the_adding_thread(open_storage, size, thread):
    """A batch whose bodies travel in the journal leads; one with a reference to the entry log does not (its
    entry-log fsync stays off the adding thread)."""
    storage = open_storage(journal_write_data=False, journal_inline_max_bytes=16 * 1024)
    answered: list[tuple[list[int], str]] = []
    done = threading.Event()

    def on_done(statuses: list[int]) -> None:
        answered.append((statuses, threading.current_thread().name))
        done.set()

    entry = CODEC.encode(1, 0, -1, 0, b"x" * size)

    def add() -> None:
        storage.add_entries_then([AddOp(1, 0, KEY, entry, False)], on_done)
        answered.append(([], "returned"))
    adder = threading.Thread(target=add, name="adding")
    adder.start()
    adder.join(WAIT_S)
    assert done.wait(WAIT_S)
    if thread == "adding":  # answered before add_entries_then returned
        assert answered == [([pb.OK], "adding"), ([], "returned")]
    else:
        assert ([pb.OK], "bookie-journal") in answered
    assert storage.read_entry(1, 0) == entry
