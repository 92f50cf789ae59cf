"""An add batch's completion without a future (``BookieStorage.add_entries_then``) and the add stream's wake-up of
a reader held back by its byte limit, which now notifies only when a reader waits."""
from __future__ import annotations

import threading
import time

import pytest

from bookie_server import add_stream
from bookie_server.add_stream import AddStreamSession
from bookie_server.limits import StreamLimits
from bookie_server.metrics import BookieMetrics
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

from .conftest import KEY, entry

LEDGER = 12


def add(entry_id: int, key: bytes = KEY) -> tuple:
    return (LEDGER, entry_id, key, entry(LEDGER, entry_id), False)


class Answers:
    """Collects the ``on_done`` calls: their statuses and the thread that made each."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], str]] = []
        self.done = threading.Event()

    def __call__(self, statuses: list[int]) -> None:
        self.calls.append((list(statuses), threading.current_thread().name))
        self.done.set()


def test_durable_adds_are_answered_once_and_readable(storage) -> None:
    """By the adding thread itself, which led the idle journal's commit (docs/protocol.md B1)."""
    answers = Answers()
    storage.add_entries_then([add(0), add(1), add(2, key=b"wrong key")], answers)
    assert answers.done.wait(10)
    time.sleep(0.1)  # a second call would come meanwhile
    assert answers.calls == [([pb.OK, pb.OK, pb.UNAUTHORIZED], threading.current_thread().name)]
    assert storage.read_entry(LEDGER, 1, KEY) == entry(LEDGER, 1)


def test_a_batch_with_nothing_to_store_is_answered_before_the_call_returns(storage) -> None:
    answers = Answers()
    storage.add_entries_then([(LEDGER, 0, KEY, b"not an entry", False)], answers)
    assert answers.calls == [([pb.BAD_REQUEST], threading.current_thread().name)]


def test_the_future_api_gives_the_same_statuses(storage) -> None:
    future = storage.add_entries([add(0), (LEDGER, 1, KEY, b"not an entry", False)])
    assert future.result(timeout=10) == [pb.OK, pb.BAD_REQUEST]


def test_freed_bytes_wake_a_reader_held_back_at_once(storage, monkeypatch) -> None:
    """The reader waits for room with a poll; freeing bytes must wake it well before the poll would."""
    monkeypatch.setattr(add_stream, "BACKPRESSURE_POLL_S", 30.0)
    session = AddStreamSession(storage, BookieMetrics(), bookie_id="test",
                               limits=StreamLimits(max_entry_size=1 << 20, max_stream_inflight_bytes=1000))
    session._held = 5000  # adds in flight hold more than the stream's limit
    resumed = threading.Event()
    reader = threading.Thread(target=lambda: (session._wait_for_room(), resumed.set()), daemon=True)
    reader.start()
    time.sleep(0.2)
    assert not resumed.is_set()  # held back
    session._free(4500)
    assert resumed.wait(2), "the reader was not woken when the bytes were freed"
    reader.join(2)


def test_freeing_without_a_waiting_reader_needs_no_wake_up(storage) -> None:
    session = AddStreamSession(storage, BookieMetrics(), bookie_id="test", limits=StreamLimits(max_entry_size=1 << 20))
    session._held = 10
    session._free(10)  # no reader waits: nothing to notify, and the count is right
    assert session._held == 0 and session._room_waiters == 0


class FailingStorage:
    """A storage whose add_entries_then raises, before or after it answered the batch."""

    def __init__(self, answer_first: bool) -> None:
        self.answer_first = answer_first
        self.on_done = None

    def add_entries_then(self, ops, on_done) -> None:
        self.on_done = on_done
        if self.answer_first:
            on_done([pb.OK] * len(ops))
        raise OSError("the storage broke")


@pytest.mark.parametrize("answer_first", [False, True])
def test_a_batch_is_answered_once_whatever_the_storage_does(answer_first) -> None:
    storage = FailingStorage(answer_first)
    session = AddStreamSession(storage, BookieMetrics(), bookie_id="test", limits=StreamLimits(max_entry_size=1 << 20))
    session._submit([add(0)], time.monotonic(), 0)
    storage.on_done([pb.OK])  # a late completion after the failure was answered: ignored
    answers = [session._results.get_nowait()]
    assert session._results.empty()
    assert answers[0][2] == ([pb.OK] if answer_first else [pb.IO_ERROR])
