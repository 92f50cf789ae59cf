"""Load shedding of a real bookie: caps per kind of call, immediate refusals, health and Info always answer.

Hostile callers use the raw generated stubs: add streams that send nothing (idle) or one tiny batch now
and then (slow drip), long polls that wait for an entry that never comes, and one huge AddBatch of tiny
adds. Every wait here is a deadline on the call (a queued call would fail with DEADLINE_EXCEEDED), not a
speed assertion.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc
from tests.bookie.conftest import KEY, entry, scrape, wait_until

ANSWER_DEADLINE_S = 5.0  # health, Info and refusals must come well within this (a queued call would not)


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class Hostile:
    """Raw calls held open against one bookie; ``close()`` ends them all (also on failure)."""

    def __init__(self, address: str, channels: int = 8) -> None:
        self._channels = [grpc.insecure_channel(address) for _ in range(channels)]
        self._stop = threading.Event()
        self._calls: list = []
        self._next = 0

    def stub(self) -> pb_grpc.BookieStub:
        self._next += 1
        return pb_grpc.BookieStub(self._channels[self._next % len(self._channels)])

    def _idle(self):
        self._stop.wait()
        return
        yield  # a generator that sends nothing until the end

    def _drip(self, ledger_id: int):
        entry_id = 0
        while not self._stop.is_set():
            yield pb.AddBatch(adds=[pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=KEY,
                                                  body=entry(ledger_id, entry_id))])
            entry_id += 1
            self._stop.wait(1.0)

    def open_streams(self, count: int, drip: bool = False, first_ledger: int = 10_000,
                     timeout: float | None = None) -> list:
        calls = []
        for index in range(count):
            requests = self._drip(first_ledger + index) if drip else self._idle()
            calls.append(self.stub().AddStream(requests, timeout=timeout))
        self._calls += calls
        return calls

    def open_long_polls(self, count: int, ledger_id: int, previous: int, timeout_ms: int = 60_000) -> list:
        calls = [self.stub().ReadLac.future(pb.ReadLacRequest(ledger_id=ledger_id, has_previous=True, master_key=KEY,
                                                              previous_lac=previous, timeout_ms=timeout_ms),
                                            timeout=90) for _ in range(count)]
        self._calls += calls
        return calls

    def close(self) -> None:
        self._stop.set()
        for call in self._calls:
            call.cancel()
        for channel in self._channels:
            channel.close()


@contextmanager
def hostile(address: str):
    attacker = Hostile(address)
    try:
        yield attacker
    finally:
        attacker.close()


def answers_health_and_info(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                          timeout=ANSWER_DEADLINE_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        info = pb_grpc.BookieStub(channel).Info(pb.BookieInfoRequest(), timeout=ANSWER_DEADLINE_S)
        assert info.status == pb.OK


def open_streams(bookie) -> float:
    return scrape(bookie.metrics_url).get("bookie_add_streams", 0.0)


def add_one(stub, ledger_id: int, entry_id: int = 0) -> pb.AddResult:
    for response in stub.AddStream(iter([pb.AddBatch(adds=[pb.AddRequest(
            ledger_id=ledger_id, entry_id=entry_id, master_key=KEY, body=entry(ledger_id, entry_id))])]),
            timeout=ANSWER_DEADLINE_S * 4):
        return response.results[0]
    raise AssertionError("no answer")


def test_past_the_stream_cap_streams_are_refused_at_once_and_health_still_answers(make_bookie):
    bookie = make_bookie(checkpoint_interval=0, max_add_streams=20, grpc_workers=4).start()
    with hostile(bookie.address) as attacker:
        attacker.open_streams(20)
        wait_until(lambda: open_streams(bookie) == 20, timeout=30, what="20 hostile streams to be open")
        answers_health_and_info(bookie.address)
        with grpc.insecure_channel(bookie.address) as channel:
            stub = pb_grpc.BookieStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                add_one(stub, 1)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "limit of 20 open add streams (--max-add-streams)" in refused.value.details()
            read = stub.Read(pb.ReadRequest(ledger_id=1, first_entry_id=0, last_entry_id=0, master_key=KEY),
                             timeout=ANSWER_DEADLINE_S)
            assert read.status == pb.NO_SUCH_LEDGER  # reads have their own threads
    # the hostile streams ended: their slots are free again
    wait_until(lambda: open_streams(bookie) == 0, timeout=30, what="the hostile streams to end")
    with grpc.insecure_channel(bookie.address) as channel:
        assert add_one(pb_grpc.BookieStub(channel), 2).status == pb.OK
    assert scrape(bookie.metrics_url)['bookie_calls_refused_total{kind="add_stream"}'] >= 1


def test_long_polls_past_their_cap_are_refused_at_once_and_do_not_block_others(make_bookie):
    bookie = make_bookie(checkpoint_interval=0, max_long_polls=10, max_concurrent_reads=4).start()
    with grpc.insecure_channel(bookie.address) as channel:
        stub = pb_grpc.BookieStub(channel)
        assert add_one(stub, 5).status == pb.OK
        with hostile(bookie.address) as attacker:
            polls = attacker.open_long_polls(100, ledger_id=5, previous=0)
            wait_until(lambda: sum(poll.done() for poll in polls) >= 90, timeout=30,
                       what="the long polls past the cap to be refused")
            refused = [poll.result() for poll in polls if poll.done()]
            assert len(refused) == 90 and {reply.status for reply in refused} == {pb.TOO_MANY_REQUESTS}
            assert "limit of 10 long polls served at once (--max-long-polls)" in refused[0].message
            answers_health_and_info(bookie.address)
            read = stub.Read(pb.ReadRequest(ledger_id=5, first_entry_id=0, last_entry_id=0, master_key=KEY),
                             timeout=ANSWER_DEADLINE_S)
            assert read.status == pb.OK
            assert add_one(stub, 5, 1).status == pb.OK
            assert add_one(stub, 5, 2).status == pb.OK  # carries LAC 1: the ten waiting polls now answer
            wait_until(lambda: all(poll.done() for poll in polls), timeout=30, what="the polls to answer")
            assert sum(poll.result().status == pb.OK for poll in polls) == 10


def test_a_client_writes_and_reads_while_200_hostile_streams_and_100_long_polls_are_open(make_bookie, metadata_uri):
    from pyspark_ledger.client import ClientConfig, LedgerClient

    bookie = make_bookie(checkpoint_interval=0).start()
    threads_before = proc_status(bookie.pid, "Threads")
    with hostile(bookie.address) as attacker, grpc.insecure_channel(bookie.address) as channel:
        assert add_one(pb_grpc.BookieStub(channel), 77).status == pb.OK
        attacker.open_streams(100)
        attacker.open_streams(100, drip=True)
        polls = attacker.open_long_polls(100, ledger_id=77, previous=0)
        wait_until(lambda: open_streams(bookie) == 200, timeout=60, what="200 hostile streams to be open")
        answers_health_and_info(bookie.address)
        with LedgerClient(metadata_uri, ClientConfig(add_timeout_s=30.0, read_timeout_s=30.0)) as client:
            writer = client.create_ledger(1, 1, 1, password=b"pw")
            for future in [writer.append_async(b"entry %d" % index) for index in range(300)]:
                future.result(60)
            writer.close()
            reader = client.open_ledger(writer.ledger_id, password=b"pw")
            assert [item.data for item in reader.read()] == [b"entry %d" % index for index in range(300)]
            reader.close()
        answers_health_and_info(bookie.address)
        assert not any(poll.done() for poll in polls)  # legal polls still waiting: nothing refused them
        threads = proc_status(bookie.pid, "Threads")
        rss_mb = proc_status(bookie.pid, "VmRSS") // 1024
    # two threads per open stream, one per poll, a few for the client's calls; nothing per request
    assert threads - threads_before < 2 * 202 + 100 + 40, threads
    assert rss_mb < 400, rss_mb


def test_an_idle_add_stream_is_ended_after_the_idle_timeout(make_bookie):
    bookie = make_bookie(checkpoint_interval=0, add_stream_idle_timeout=3).start()
    with hostile(bookie.address) as attacker:
        drip, = attacker.open_streams(1, drip=True)
        call, = attacker.open_streams(1, timeout=30)
        assert list(call) == []  # ends (status OK) after three seconds of idleness, long before the deadline
        assert call.code() == grpc.StatusCode.OK
        time.sleep(2)  # the drip sends a batch every second: not idle
        assert drip.running() and open_streams(bookie) == 1


def test_past_the_bookie_wide_byte_budget_adds_are_refused_at_once(make_bookie):
    bookie = make_bookie(checkpoint_interval=0, max_inflight_bytes=256 * 1024, max_entry_size=64 * 1024,
                         max_stream_inflight_bytes=128 * 1024).start()
    with grpc.insecure_channel(bookie.address) as channel:
        stub = pb_grpc.BookieStub(channel)
        adds = [pb.AddRequest(ledger_id=9, entry_id=index, master_key=KEY, body=entry(9, index, b"x" * 30_000))
                for index in range(10)]
        results = []
        for response in stub.AddStream(iter([pb.AddBatch(adds=adds)]), timeout=30):
            results += response.results
        assert len(results) == 10 and {result.status for result in results} == {pb.TOO_MANY_REQUESTS}
        assert "--max-inflight-bytes" in results[0].message and str(256 * 1024) in results[0].message
        assert add_one(stub, 9).status == pb.OK  # within the budget: taken


def test_hostile_batches_of_tiny_adds_leave_the_bookie_small(make_bookie):
    bookie = make_bookie(checkpoint_interval=0).start()
    with grpc.insecure_channel(bookie.address, options=[("grpc.max_send_message_length", -1)]) as channel:
        stub = pb_grpc.BookieStub(channel)
        one = pb.AddRequest(ledger_id=3, entry_id=1, master_key=b"k", body=b"x").SerializeToString()
        framed = bytes([0x0A, len(one)]) + one  # field 1 (adds), length-delimited: one add of an AddBatch
        for count in (400_000, 1_500_000):  # ~5 MB: over --max-batch-adds; ~20 MB: over the receive limit
            batch = pb.AddBatch.FromString(framed * count)  # built in C: quick, and small in this process
            with pytest.raises(grpc.RpcError) as refused:
                list(stub.AddStream(iter([batch]), timeout=60))
            assert refused.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
            del batch
        assert add_one(stub, 4).status == pb.OK
    answers_health_and_info(bookie.address)
    rss_mb = proc_status(bookie.pid, "VmRSS") // 1024
    assert rss_mb < 200, rss_mb  # before the limits: 400+ MB left behind by the 20 MB batch alone


def test_a_client_whose_stream_was_ended_for_idleness_writes_on(make_bookie, metadata_uri):
    from pyspark_ledger.client import ClientConfig, LedgerClient

    bookie = make_bookie(checkpoint_interval=0, add_stream_idle_timeout=1).start()
    with LedgerClient(metadata_uri, ClientConfig(add_timeout_s=30.0, explicit_lac_interval_s=0)) as client:
        writer = client.create_ledger(1, 1, 1, password=b"pw")  # one bookie: a failed add could not move on
        writer.append(b"before")
        wait_until(lambda: open_streams(bookie) == 0, timeout=30, what="the idle stream to be ended")
        writer.append(b"after")
        writer.close()
        assert writer.metadata.current_fragment.bookies == (bookie.bookie_id,)
        reader = client.open_ledger(writer.ledger_id, password=b"pw")
        assert [item.data for item in reader.read()] == [b"before", b"after"]
        reader.close()


def test_a_stream_that_reads_no_answers_is_read_no_further(make_bookie):
    """Back-pressure: unsent answers count against --max-stream-inflight-bytes, so a client that sends batch
    after batch of bad adds and never reads the answers is held back by gRPC flow control, not buffered."""
    bookie = make_bookie(checkpoint_interval=0, max_stream_inflight_bytes=2**20).start()
    one = pb.AddRequest(ledger_id=3, entry_id=1, master_key=b"k", body=b"x").SerializeToString()
    batch = pb.AddBatch.FromString((bytes([0x0A, len(one)]) + one) * 50_000)  # 50,000 BAD_REQUEST adds
    sent = []
    stop = threading.Event()

    def batches():
        while not stop.is_set() and len(sent) < 200:
            sent.append(1)
            yield batch

    with grpc.insecure_channel(bookie.address) as channel:
        call = pb_grpc.BookieStub(channel).AddStream(batches(), timeout=60)  # answers never read
        try:
            time.sleep(5)
            answers_health_and_info(bookie.address)
            rss_mb = proc_status(bookie.pid, "VmRSS") // 1024
            assert len(sent) < 200, "the bookie kept reading a stream whose answers were not read"
            assert rss_mb < 300, rss_mb  # 200 batches answered in memory would take over 1 GB
        finally:
            stop.set()
            call.cancel()
