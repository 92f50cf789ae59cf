"""The durable fan-out's servers (bench/durable_bookies.py): an add is answered only after an fdatasync that began
once its bytes were in the file; they answer as a bookie does (docs/protocol.md W9) and leave no file behind."""
from __future__ import annotations

import os
import threading
from concurrent import futures as cf

import grpc
import pytest

from bench.durable_bookies import DurableBookie, durable_servers, sync_figures
from pyspark_ledger.client.add_listeners import AddCallbacks
from pyspark_ledger.client.add_wire import AddEncoder
from pyspark_ledger.client.bookie_rpc import BookieClient
from pyspark_ledger.testing.bookies import free_port
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc
from tests.waiting import wait_until

ENCODER = AddEncoder(3, b"k" * 20)


def body(entry_id: int) -> bytes:
    return entry_id.to_bytes(8, "big") * 8


def frame(entry_id: int) -> bytes:
    """The encoded AddRequest (ledger 3) carrying ``body(entry_id)``."""
    return ENCODER.encode(entry_id, body(entry_id))


class Answers:
    """What a client heard, in either form, as (ledger id, entry id, status)."""

    def __init__(self, check=None) -> None:
        self.seen: list[tuple[int, int, int]] = []
        self.forms: set[str] = set()
        self._lock, self._check = threading.Lock(), check or (lambda _answers: None)
        self.listener = AddCallbacks(self._results, lambda *_: None, self._acks)

    def _add(self, form: str, answers: list) -> None:
        self._check(answers)
        with self._lock:
            self.forms.add(form)
            self.seen += answers

    def _results(self, _bookie, results) -> None:
        self._add("results", [(r.ledger_id, r.entry_id, r.status) for r in results])

    def _acks(self, _bookie, spans) -> None:
        self._add("runs", [(ledger_id, e, pb.OK) for ledger_id, ids in spans for e in ids])


def test_an_add_is_answered_only_after_an_fdatasync_begun_once_it_was_written(tmp_path):
    size = len(body(0))
    durable = {"entries": 0, "syncs": 0}
    entered, release = threading.Event(), threading.Event()
    violations: list[int] = []

    def watched_sync(fd: int) -> None:
        written = os.fstat(fd).st_size // size  # not preallocated: the file's size is what was written
        entered.set()
        release.wait(10)  # the first sync is held until the test has looked for an early answer
        os.fdatasync(fd)
        durable["entries"] = max(durable["entries"], written)
        durable["syncs"] += 1

    def check(answers) -> None:  # runs on the client when answers arrive: each must be durable already
        violations.extend(entry_id for _ledger_id, entry_id, _status in answers if entry_id >= durable["entries"])
    servicer = DurableBookie(tmp_path / "adds", sync=watched_sync)
    server = grpc.server(cf.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_BookieServicer_to_server(servicer, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    client = BookieClient(f"127.0.0.1:{port}", answer_runs=True)
    answers = Answers(check)
    try:
        with client.add_stream() as stream:
            stream.send(3, [(0, frame(0))], answers.listener)
            assert entered.wait(10), "the server never synced"
            assert (tmp_path / "adds").read_bytes() == body(0)  # written before the sync
            stream.send(3, [(1, frame(1))], answers.listener)
            threading.Event().wait(0.3)
            assert answers.seen == [], "answered while its fdatasync had not returned"
            release.set()
            for start in range(2, 200, 9):
                stream.send(3, [(e, frame(e)) for e in range(start, min(start + 9, 200))], answers.listener)
            wait_until(lambda: len(answers.seen) == 200, 30, "every add to be answered")
    finally:
        release.set()
        client.close()
        server.stop(None)
        servicer.close()
    assert violations == []
    assert answers.seen == [(3, e, pb.OK) for e in range(200)]
    assert 2 <= durable["syncs"] <= 24  # the adds queued during a sync share the next one
    assert (tmp_path / "adds").read_bytes() == b"".join(body(e) for e in range(200))


@pytest.mark.parametrize("runs", [True, False], ids=["asks-for-runs", "per-add"])
def test_W9_durable_servers_answer_as_a_bookie_does_and_remove_their_files(tmp_path, runs):
    answers = Answers()
    with durable_servers(2, tmp_path, preallocate=1 << 20) as servers:
        (directory,) = tmp_path.iterdir()
        clients = [BookieClient(f"127.0.0.1:{port}", answer_runs=runs) for _, port in servers]
        try:
            streams = [client.add_stream() for client in clients]
            for start in range(0, 300, 50):
                for stream in streams:
                    stream.send(3, [(e, frame(e)) for e in range(start, start + 50)], answers.listener)
            wait_until(lambda: len(answers.seen) == 600, 30, "every add to be answered by both servers")
            for _, port in servers:  # every add was in one group commit
                figures = sync_figures(port)
                assert figures["commits"] >= 1 and figures["fdatasync_p50_ms"] >= 0
                assert figures["commits"] * figures["adds_per_fdatasync"] == pytest.approx(300, abs=0.01 * 300)
            for stream in streams:
                stream.close()
        finally:
            for client in clients:
                client.close()
        files = sorted(directory.iterdir())
        assert len(files) == 2 and all(path.stat().st_size == 1 << 20 for path in files)  # overwritten in place
        bodies = b"".join(body(e) for e in range(300))
        assert all(path.read_bytes()[:len(bodies)] == bodies for path in files)
    assert list(tmp_path.iterdir()) == []
    assert all(process.poll() is not None for process, _ in servers)
    assert answers.forms == {"runs" if runs else "results"}
    assert sorted(answers.seen) == sorted([(3, e, pb.OK) for e in range(300)] * 2)


class FakeFramedCall:
    """A plaintext framed call as ``DurableBookie.AddStream`` sees it: answers may be sent from any thread; each send
    is noted with its thread."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str]] = []
        self.answer_sender = self

    def invocation_metadata(self):
        return [("ledger-add-answers", "runs")]

    def answer_bytes(self, answer) -> bytes:
        return answer.SerializeToString()

    def send_now(self, data: bytes) -> int:
        self.sent.append((data, threading.current_thread().name))
        return len(data)

    send_all = send_now

    def acked(self) -> list[int]:
        return [e for data, _ in self.sent for run in pb.AddResultBatch.FromString(data).acked
                for e in range(run.first_entry_id, run.last_entry_id + 1)]


def test_a_framed_stream_is_synced_and_answered_by_its_reader(tmp_path):
    """As a bookie's journal (docs/protocol.md B1): no hand-off to the handler thread. A batch sent during a sync
    waits in the connection until the reader is done; answers leave in order, each after its own fdatasync."""
    syncs: list[tuple[str, int]] = []
    size = len(body(0))
    entered, release = threading.Event(), threading.Event()

    def watched_sync(fd: int) -> None:
        syncs.append((threading.current_thread().name, os.fstat(fd).st_size // size))
        if len(syncs) == 2:  # the second sync is held until another batch was sent meanwhile
            entered.set()
            release.wait(10)
        os.fdatasync(fd)

    import queue
    requests: queue.Queue = queue.Queue()

    def request_iterator():
        while (batch := requests.get(timeout=30)) is not None:
            yield batch

    def batch(*entry_ids: int) -> pb.AddBatch:
        return pb.AddBatch(adds=[pb.AddRequest(ledger_id=3, entry_id=e, master_key=b"k" * 20, body=body(e))
                                 for e in entry_ids])
    servicer, call = DurableBookie(tmp_path / "adds", sync=watched_sync), FakeFramedCall()
    handler = threading.Thread(target=lambda: list(servicer.AddStream(request_iterator(), call)), name="handler")
    handler.start()
    try:
        requests.put(batch(0))
        wait_until(lambda: call.acked() == [0], 10, "the first add to be answered")
        requests.put(batch(1, 2))
        assert entered.wait(10)
        requests.put(batch(3))  # sent while the reader syncs 1 and 2
        threading.Event().wait(0.2)
        assert call.acked() == [0]  # nothing answered before its fdatasync returned
        release.set()
        wait_until(lambda: call.acked() == [0, 1, 2, 3], 10, "every add to be answered, in order")
    finally:
        release.set()
        requests.put(None)
        handler.join(10)
        servicer.close()
    assert syncs == [("durable-reader", 1), ("durable-reader", 3), ("durable-reader", 4)]  # each after its write
    assert [thread for _, thread in call.sent] == ["durable-reader"] * 3
    assert (tmp_path / "adds").read_bytes() == b"".join(body(e) for e in range(4))
    assert servicer.figures()["commits"] == 3


def test_adds_one_at_a_time_never_wake_the_handler_thread(tmp_path):
    """A reader that synced and answered its add itself wakes the handler only when that has work (adds queued
    meanwhile, answers or bytes left unsent): a wake-up per add is a bookie's CPU the limit would not spare."""
    import queue
    requests: queue.Queue = queue.Queue()

    def request_iterator():
        while (batch := requests.get(timeout=30)) is not None:
            yield batch
    servicer, call = DurableBookie(tmp_path / "adds"), FakeFramedCall()
    handler = threading.Thread(target=lambda: list(servicer.AddStream(request_iterator(), call)), name="handler")
    handler.start()
    try:
        for entry_id in range(50):
            requests.put(pb.AddBatch(adds=[pb.AddRequest(ledger_id=3, entry_id=entry_id, master_key=b"k" * 20,
                                                         body=body(entry_id))]))
            wait_until(lambda: len(call.acked()) == entry_id + 1, 10, "the add to be answered")
        wakes = servicer.handler_wakes
    finally:
        requests.put(None)
        handler.join(10)
        servicer.close()
    assert call.acked() == list(range(50))
    assert {thread for _, thread in call.sent} == {"durable-reader"}
    assert wakes <= 2, f"the handler was woken {wakes} times for 50 adds the reader answered"
