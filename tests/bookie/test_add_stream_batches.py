"""AddStream.send against a real bookie: answers per received batch, one failure call per broken stream."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.add_listeners import AddCallbacks
from pyspark_ledger.client.add_wire import AddEncoder
from pyspark_ledger.errors import BookieUnavailableError, InvalidStateError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

from .conftest import KEY, entry, wait_until


class Recorder:
    """An add listener that records every call."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int, int]]] = []
        self.failures: list[tuple[list, BaseException]] = []
        self.lock = threading.Lock()
        self.listener = AddCallbacks(self._answered, self._failed)

    def _answered(self, bookie_id: str, results: list) -> None:
        with self.lock:
            self.batches.append([(r.ledger_id, r.entry_id, r.status) for r in results])

    def _failed(self, bookie_id: str, keys: list, error: BaseException) -> None:
        with self.lock:
            self.failures.append((sorted(keys), error))

    def answered(self) -> int:
        with self.lock:
            return sum(len(batch) for batch in self.batches)


def test_one_send_is_one_batch_answered_by_one_listener_call(bookie, client_for):
    client = client_for(bookie)
    encoder, recorder = AddEncoder(950, KEY), Recorder()
    with client.add_stream() as stream:
        stream.send(950, [(e, encoder.encode(e, entry(950, e))) for e in range(200)], recorder.listener)
        wait_until(lambda: recorder.answered() == 200, 30, "every add to be answered")
        with pytest.raises(InvalidStateError, match="already in flight"):
            stream.send(951, [(0, encoder.encode(0, entry(951, 0)))] * 2, recorder.listener)
    assert recorder.batches == [[(950, e, pb.OK) for e in range(200)]]
    assert recorder.failures == []
    assert client.read(950, 0, 199, master_key=KEY).entries == tuple((e, entry(950, e)) for e in range(200))


def test_large_and_small_adds_mixed_in_one_send_are_all_stored(bookie, client_for):
    client = client_for(bookie)
    encoder, recorder = AddEncoder(953, KEY), Recorder()
    sizes = [10, 200_000, 10, 10, 300_000, 70_000, 10]
    bodies = [entry(953, e, bytes([e]) * size) for e, size in enumerate(sizes)]
    with client.add_stream(max_batch_bytes=100_000) as stream:
        stream.send(953, [(e, encoder.encode(e, body)) for e, body in enumerate(bodies)], recorder.listener)
        wait_until(lambda: recorder.answered() == len(sizes), 30, "every add to be answered")
    assert sorted(result for batch in recorder.batches for result in batch) == \
        [(953, e, pb.OK) for e in range(len(sizes))]
    assert [client.read(953, e, master_key=KEY).entries for e in range(len(sizes))] == [
        ((e, body),) for e, body in enumerate(bodies)]


def test_a_broken_stream_reports_every_unanswered_add_once(make_bookie, client_for):
    bookie = make_bookie().start()
    client = client_for(bookie)
    encoder, recorder = AddEncoder(952, KEY), Recorder()
    stream = client.add_stream()
    stream.send(952, [(0, encoder.encode(0, entry(952, 0)))], recorder.listener)
    wait_until(lambda: recorder.answered() == 1, 30, "the first add to be answered")
    bookie.pause()  # the next adds reach a bookie that cannot answer
    stream.send(952, [(e, encoder.encode(e, entry(952, e))) for e in range(1, 6)], recorder.listener)
    bookie.kill()
    wait_until(lambda: recorder.failures, 30, "the stream to report its failure")
    assert stream.closed
    (keys, error), = recorder.failures
    assert keys == [(952, e) for e in range(1, 6)] and isinstance(error, BookieUnavailableError)
    with pytest.raises(BookieUnavailableError, match="has ended"):
        stream.send(952, [(6, encoder.encode(6, entry(952, 6)))], recorder.listener)


def test_answers_of_one_batch_go_to_each_listener_of_its_adds(bookie, client_for):
    """Two listeners' adds sent back to back (joined into the same AddBatches, answered in the same
    AddResultBatches): each gets exactly its own answers, in order; a future-style add (``add``) on the same
    stream gets its own."""
    client = client_for(bookie)
    first, second = Recorder(), Recorder()
    encoder = AddEncoder(957, KEY)
    with client.add_stream() as stream:
        stream.send(957, [(e, encoder.encode(e, entry(957, e))) for e in range(0, 20, 2)], first.listener)
        stream.send(957, [(e, encoder.encode(e, entry(957, e))) for e in range(1, 20, 2)], second.listener)
        alone = stream.add(957, 20, KEY, entry(957, 20))
        wait_until(lambda: first.answered() == 10 and second.answered() == 10, 30, "every add to be answered")
        assert alone.result(30).ok
    assert [key for batch in first.batches for key in batch] == [(957, e, pb.OK) for e in range(0, 20, 2)]
    assert [key for batch in second.batches for key in batch] == [(957, e, pb.OK) for e in range(1, 20, 2)]
