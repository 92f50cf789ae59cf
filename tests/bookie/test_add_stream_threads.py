"""Which bookie thread answers an add: the reader of a lone add it committed itself, the handler otherwise.

The servicer runs in this process over a real storage and a real gRPC server on 127.0.0.1, so that the
sending thread can be seen (add_stream.py's docstring, journal.py ``commit_here``)."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from bookie_server.limits import BookieBudgets, StreamLimits
from bookie_server.metrics import BookieMetrics
from bookie_server.service import BookieServicer
from bookie_server.storage import BookieStorage, StorageConfig
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc

from .conftest import KEY, entry

_END = object()


class WatchedServicer(BookieServicer):
    """Records the name of the thread that sends each answer."""

    senders: list[str]

    def AddStream(self, request_iterator, context, send_response):
        def send(response):
            if response is not None:
                self.senders.append(threading.current_thread().name)
            send_response(response)
        return super().AddStream(request_iterator, context, send)

    AddStream.experimental_non_blocking = True


@pytest.fixture
def served(tmp_path):
    """(stub, servicer, storage) of a servicer in this process; everything is stopped at teardown."""
    storage = BookieStorage(StorageConfig(tmp_path / "bookie", checkpoint_interval_s=0))
    servicer = WatchedServicer(storage, BookieMetrics(), bookie_id="b1", version="test",
                               limits=StreamLimits(max_entry_size=1 << 20),
                               budgets=BookieBudgets(inflight_bytes=1 << 28, add_streams=4, long_polls=4, reads=4))
    servicer.senders = []
    executor = ThreadPoolExecutor(max_workers=8)
    server = grpc.server(executor)
    pb_grpc.add_BookieServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.BookieStub(channel), servicer, storage
    finally:
        channel.close()
        server.stop(0).wait(10)
        executor.shutdown(wait=True)
        storage.close()


def _batch(ledger_id: int, entry_ids) -> pb.AddBatch:
    return pb.AddBatch(adds=[pb.AddRequest(ledger_id=ledger_id, entry_id=e, master_key=KEY, body=entry(ledger_id, e))
                             for e in entry_ids])


def _requests(outbox: queue.Queue):
    while (item := outbox.get()) is not _END:
        yield item


def test_lone_adds_are_answered_by_the_reader_and_a_burst_by_the_handler_each_exactly_once(served):
    stub, servicer, storage = served
    outbox: queue.Queue = queue.Queue()
    answers = stub.AddStream(_requests(outbox), timeout=60)
    for entry_id in range(5):  # one add at a time, each answered before the next is sent: the journal is idle
        threading.Event().wait(0.02)
        outbox.put(_batch(7, [entry_id]))
        assert [(r.entry_id, r.status) for r in next(answers).results] == [(entry_id, pb.OK)]
    assert all(name.startswith("add-stream-reader") for name in servicer.senders), servicer.senders
    for first in range(5, 2005, 20):  # a burst: group commits on the journal thread, answered by the handler
        outbox.put(_batch(7, range(first, first + 20)))
    outbox.put(_END)
    seen = [(r.entry_id, r.status) for response in answers for r in response.results]
    assert sorted(seen) == [(e, pb.OK) for e in range(5, 2005)]  # every add answered exactly once, then OK status
    assert any(not name.startswith("add-stream-reader") for name in servicer.senders)
    assert [storage.read_entry(7, e) for e in (0, 4, 2004)] == [entry(7, e) for e in (0, 4, 2004)]
