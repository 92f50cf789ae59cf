"""client/stream_answers.py: answers taken off the adds in flight, handed to the listeners whose adds they
answer, malformed runs refused, senders waiting for room woken, and unanswered adds told once per listener."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.stream_answers import StreamAnswers
from pyspark_ledger.errors import BookieError, BookieUnavailableError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


class Heard:
    def __init__(self) -> None:
        self.results: list = []
        self.acks: list = []
        self.failed: list = []

    def on_add_results(self, bookie_id, results):
        self.results.append((bookie_id, [(r.ledger_id, r.entry_id, r.status) for r in results]))

    def on_add_acks(self, bookie_id, spans):
        self.acks.append((bookie_id, [(ledger_id, list(ids)) for ledger_id, ids in spans]))

    def on_add_failure(self, bookie_id, keys, error):
        self.failed.append((bookie_id, sorted(keys), error))


def answers(max_inflight: int = 100) -> tuple[StreamAnswers, threading.Lock]:
    lock = threading.Lock()
    return StreamAnswers("b1", lock, max_inflight), lock


def runs(*bounds) -> pb.AddResultBatch:
    return pb.AddResultBatch(acked=[pb.AckRun(ledger_id=ledger_id, first_entry_id=first, last_entry_id=last)
                                    for ledger_id, first, last in bounds])


def test_runs_go_to_the_listener_of_each_add_split_where_it_changes_and_leave_the_adds_in_flight():
    stream, lock = answers()
    one, two = Heard(), Heard()
    with lock:
        assert stream.register(7, [0, 1, 2], one) is None
        assert stream.register(7, [3, 4], two) is None
        assert stream.register(8, [0], one) is None
    taken = stream.take(runs((7, 0, 4), (8, 0, 0)))
    assert taken.count == 6 and taken.results is None and len(stream) == 0
    stream.deliver(taken)
    assert one.acks == [("b1", [(7, [0, 1, 2]), (8, [0])])]
    assert two.acks == [("b1", [(7, [3, 4])])]


def test_results_go_to_their_listeners_and_an_answer_nobody_awaits_is_dropped():
    stream, lock = answers()
    one, two = Heard(), Heard()
    with lock:
        stream.register(7, [0], one)
        stream.register(9, [0], two)
    batch = pb.AddResultBatch(results=[pb.AddResult(ledger_id=7, entry_id=0, status=pb.OK),
                                       pb.AddResult(ledger_id=5, entry_id=3, status=pb.OK),  # never sent
                                       pb.AddResult(ledger_id=9, entry_id=0, status=pb.FENCED)])
    taken = stream.take(batch)
    assert taken.count == 3 and len(stream) == 0
    stream.deliver(taken)
    assert one.results == [("b1", [(7, 0, pb.OK)])]
    assert two.results == [("b1", [(9, 0, pb.FENCED)])]


@pytest.mark.parametrize("bounds", [[(7, 0, 3)], [(7, 2, 1)], [(7, 0, 1), (7, 0, 1)]],
                         ids=["more than in flight", "ends before it starts", "twice the adds in flight"])
def test_malformed_runs_are_refused_and_take_nothing(bounds):
    stream, lock = answers()
    with lock:
        stream.register(7, [0, 1, 2], Heard())
    with pytest.raises(BookieError, match="malformed answer"):
        stream.take(runs(*bounds))
    assert len(stream) == 3


def test_a_repeated_entry_id_registers_nothing():
    stream, lock = answers()
    with lock:
        stream.register(7, [0, 1], Heard())
        assert stream.register(7, [1, 2], Heard()) == 1
    assert len(stream) == 2


def test_a_sender_waiting_for_room_wakes_when_an_answer_frees_it():
    stream, lock = answers(max_inflight=2)
    with lock:
        stream.register(7, [0, 1], Heard())
    woke = threading.Event()

    def sender():
        with lock:
            stream.wait_for_room(lambda: False)
        woke.set()
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    assert not woke.wait(0.2)  # full: it waits
    stream.take(runs((7, 0, 0)))
    assert woke.wait(10)
    thread.join(10)


def test_a_sender_waiting_for_room_wakes_to_find_the_stream_stopping():
    stream, lock = answers(max_inflight=1)
    with lock:
        stream.register(7, [0], Heard())
    stopping = threading.Event()
    woke = threading.Event()

    def sender():
        with lock:
            stream.wait_for_room(stopping.is_set)
        woke.set()
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    assert not woke.wait(0.2)
    with lock:
        stopping.set()
        stream.wake_all()
    assert woke.wait(10)
    thread.join(10)


def test_unanswered_adds_are_told_once_per_listener_and_nothing_stays_in_flight():
    stream, lock = answers()
    one, two = Heard(), Heard()
    with lock:
        stream.register(7, [0, 1], one)
        stream.register(7, [2], two)
        stream.register(8, [5], one)
        pending = stream.take_all()
    assert len(stream) == 0
    error = BookieUnavailableError("gone", bookie_id="b1")
    stream.fail(pending, error)
    assert one.failed == [("b1", [(7, 0), (7, 1), (8, 5)], error)]
    assert two.failed == [("b1", [(7, 2)], error)]
