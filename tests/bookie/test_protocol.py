"""The Bookie gRPC service against one real bookie process: statuses, limits, malformed input.

One bookie (small limits: 64 KiB entries, 8 adds in flight per stream) serves
every test of this module; each test uses its own ledger ids.
"""
from __future__ import annotations

import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pyspark_ledger.client import BookieClient, BookieStatus
from pyspark_ledger.testing.bookies import BookieProcess
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc

from .conftest import KEY, WRONG_KEY, entry, scrape, wait_until

MAX_ENTRY = 64 * 1024
MAX_INFLIGHT = 8


@pytest.fixture(scope="module")
def shared_bookie(tmp_path_factory):
    base = tmp_path_factory.mktemp("protocol")
    bookie = BookieProcess(base / "bookie", f"sqlite:///{base}/metadata.db?lease_seconds=2",
                           max_entry_size=MAX_ENTRY, max_inflight_adds=MAX_INFLIGHT, checkpoint_interval=0,
                           no_verify_new_ledgers=True)  # raw ledger ids without metadata: no ledger guard
    bookie.start()
    try:
        yield bookie
    finally:
        assert bookie.stop() == 0, bookie.stderr_tail()


@pytest.fixture(scope="module")
def client(shared_bookie):
    with BookieClient(shared_bookie.bookie_id) as bookie_client:
        yield bookie_client


@pytest.fixture(scope="module")
def stub(shared_bookie):
    channel = grpc.insecure_channel(shared_bookie.address)
    try:
        yield pb_grpc.BookieStub(channel)
    finally:
        channel.close()


def add_all(client: BookieClient, adds) -> list:
    """Send adds on a fresh stream and return their results."""
    with client.add_stream(max_inflight=MAX_INFLIGHT) as stream:
        futures = [stream.add(*add) for add in adds]
        return [future.result(30) for future in futures]


def send_batch(stub, adds: list[pb.AddRequest]) -> dict[tuple[int, int], pb.AddResult]:
    """Send exactly one AddBatch on a raw stream; the results by (ledger, entry)."""
    results = {}
    for response in stub.AddStream(iter([pb.AddBatch(adds=adds)]), timeout=30):
        for result in response.results:
            results[(result.ledger_id, result.entry_id)] = result
    return results


def test_health_service_answers_serving(shared_bookie):
    with grpc.insecure_channel(shared_bookie.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "pyspark_ledger.wire.v1.Bookie"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_info_names_the_bookie_and_its_limits(client, shared_bookie):
    info = client.info()
    assert info.status == BookieStatus.OK
    assert info.bookie_id == shared_bookie.bookie_id
    assert info.max_entry_bytes == MAX_ENTRY
    assert 0 < info.free_bytes <= info.total_bytes
    assert info.read_only is False and info.version


def test_adds_read_back_as_range_and_single_entries(client):
    results = add_all(client, [(101, e, KEY, entry(101, e)) for e in range(20)])
    assert all(result.ok for result in results)
    whole = client.read(101, 0, 19, master_key=KEY)
    assert whole.status == BookieStatus.OK
    assert whole.entries == tuple((e, entry(101, e)) for e in range(20))
    assert (whole.last_add_confirmed, whole.last_entry_id, whole.fenced) == (18, 19, False)
    assert client.read(101, 7, master_key=KEY).entries == ((7, entry(101, 7)),)
    # a range stops early at the first missing entry; a missing first entry is NO_SUCH_ENTRY
    assert [e for e, _ in client.read(101, 15, 40, master_key=KEY).entries] == list(range(15, 20))
    missing = client.read(101, 20, master_key=KEY)
    assert missing.status == BookieStatus.NO_SUCH_ENTRY and missing.last_entry_id == 19
    assert client.read(999_999, 0, master_key=KEY).status == BookieStatus.NO_SUCH_LEDGER


def test_range_read_respects_max_bytes(client):
    add_all(client, [(102, e, KEY, entry(102, e, b"x" * 1000)) for e in range(10)])
    limited = client.read(102, 0, 9, max_bytes=3500, master_key=KEY)
    assert limited.status == BookieStatus.OK
    assert [e for e, _ in limited.entries] == [0, 1, 2]


def test_strided_range_reads_answer_every_step_th_entry(client):
    """What a striped ledger's reader asks: only the entries of one write set, first, first + step, ..."""
    stored = [e for e in range(40) if e % 5 in (1, 2, 3)]  # what bookie 3 of E=5, Qw=3 stores
    add_all(client, [(110, e, KEY, entry(110, e)) for e in stored])
    strided = client.read(110, 3, 38, entry_step=5, master_key=KEY)
    assert strided.status == BookieStatus.OK
    assert strided.entries == tuple((e, entry(110, e)) for e in range(3, 39, 5))
    assert [e for e, _ in client.read(110, 1, 36, entry_step=5, master_key=KEY).entries] == list(range(1, 37, 5))
    # stops at the first missing entry of the stride; a missing first entry is NO_SUCH_ENTRY
    assert [e for e, _ in client.read(110, 32, 60, entry_step=5, master_key=KEY).entries] == [32, 37]
    assert client.read(110, 4, 39, entry_step=5, master_key=KEY).status == BookieStatus.NO_SUCH_ENTRY
    assert [e for e, _ in client.read(110, 1, 38, entry_step=5, max_bytes=1,
                                      master_key=KEY).entries] == [1]  # at least one entry, then the budget
    assert [e for e, _ in client.read(110, 1, 3, entry_step=0, master_key=KEY).entries] == [1, 2, 3]
    refused = client.read(110, 1, 3, entry_step=70_000, master_key=KEY)
    assert refused.status == BookieStatus.BAD_REQUEST and "entry_step 70000" in refused.message


def test_fence_of_unknown_ledger_creates_it_fenced(client):
    """docs/protocol.md F4: later adds are FENCED, recovery adds are accepted."""
    fenced = client.read(103, 0, fence=True, master_key=KEY)
    assert fenced.status == BookieStatus.NO_SUCH_ENTRY
    assert fenced.fenced is True and fenced.last_entry_id == -1
    normal, recovery = add_all(client, [(103, 0, KEY, entry(103, 0)), (103, 1, KEY, entry(103, 1), True)])
    assert normal.status == BookieStatus.FENCED and "fenced" in normal.message
    assert recovery.status == BookieStatus.OK
    assert client.read(103, 0, master_key=KEY).status == BookieStatus.NO_SUCH_ENTRY
    assert client.read(103, 1, master_key=KEY).entries == ((1, entry(103, 1)),)


def test_fence_needs_a_master_key(client):
    reply = client.read(104, 0, fence=True)
    assert reply.status == BookieStatus.UNAUTHORIZED and "needs its master key" in reply.message
    assert client.read_lac(104, master_key=KEY).status == BookieStatus.NO_SUCH_LEDGER


def test_wrong_master_key_is_unauthorized_and_writes_nothing(client):
    """W8: on add and on fence."""
    assert add_all(client, [(105, 0, KEY, entry(105, 0))])[0].ok
    (wrong,) = add_all(client, [(105, 1, WRONG_KEY, entry(105, 1))])
    assert wrong.status == BookieStatus.UNAUTHORIZED and "master key" in wrong.message
    assert client.read(105, 1, master_key=KEY).status == BookieStatus.NO_SUCH_ENTRY
    fence = client.read(105, 0, fence=True, master_key=WRONG_KEY)
    assert fence.status == BookieStatus.UNAUTHORIZED and fence.fenced is False
    assert client.read(105, 0, master_key=WRONG_KEY).status == BookieStatus.UNAUTHORIZED
    assert client.read(105, 0, master_key=KEY).entries == ((0, entry(105, 0)),)
    lac = client.read_lac(105, master_key=KEY)
    assert (lac.last_entry_id, lac.fenced) == (0, False)


def test_oversize_entry_is_a_bad_request_naming_size_and_limit(client):
    body = entry(106, 0, b"y" * (MAX_ENTRY + 1000))
    (result,) = add_all(client, [(106, 0, KEY, body)])
    assert result.status == BookieStatus.BAD_REQUEST
    assert str(len(body)) in result.message and str(MAX_ENTRY) in result.message
    assert client.read(106, 0, master_key=KEY).status == BookieStatus.NO_SUCH_LEDGER


def test_adds_beyond_the_inflight_limit_get_too_many_requests(stub):
    adds = [pb.AddRequest(ledger_id=107, entry_id=e, master_key=KEY, body=entry(107, e)) for e in range(20)]
    results = send_batch(stub, adds)
    statuses = [results[(107, e)].status for e in range(20)]
    assert statuses == [pb.OK] * MAX_INFLIGHT + [pb.TOO_MANY_REQUESTS] * (20 - MAX_INFLIGHT)
    assert "--max-inflight-adds" in results[(107, 19)].message


def test_malformed_adds_are_bad_requests_and_the_bookie_keeps_serving(stub, client):
    good = entry(108, 0)
    adds = [
        pb.AddRequest(ledger_id=108, entry_id=1, master_key=KEY, body=b"garbage, not an entry"),
        pb.AddRequest(ledger_id=108, entry_id=2, master_key=KEY, body=b""),
        pb.AddRequest(ledger_id=108, entry_id=-1, master_key=KEY, body=entry(108, 0)),
        pb.AddRequest(ledger_id=108, entry_id=4, master_key=KEY, body=entry(108, 5)),
        pb.AddRequest(ledger_id=2**64 - 1, entry_id=2**63 - 1, master_key=KEY, body=good),
        pb.AddRequest(ledger_id=108, entry_id=2**63 - 1, master_key=KEY, body=entry(108, 2**63 - 1)[:30]),
    ]
    results = send_batch(stub, adds)
    assert len(results) == len(adds)
    for result in results.values():
        assert result.status == pb.BAD_REQUEST, result
        assert result.message
    assert "negative" in results[(108, -1)].message
    assert "names ledger 108 entry 5" in results[(108, 4)].message
    # unparsable protobuf on the wire: that call fails, the bookie does not
    raw = grpc.insecure_channel(client.address)
    try:
        call = raw.stream_stream("/pyspark_ledger.wire.v1.Bookie/AddStream", request_serializer=None,
                                 response_deserializer=None)
        with pytest.raises(grpc.RpcError):
            list(call(iter([b"\xff\xff\xff\xff\x0f not protobuf"]), timeout=30))
    finally:
        raw.close()
    bad_read = client.read(108, 5, 2, master_key=KEY)
    assert bad_read.status == BookieStatus.BAD_REQUEST and "below" in bad_read.message
    assert client.read(108, -3, master_key=KEY).status == BookieStatus.BAD_REQUEST
    assert add_all(client, [(108, 0, KEY, good)])[0].ok
    assert client.read(108, 0, master_key=KEY).entries == ((0, good),)


def test_long_poll_returns_on_a_new_lac_and_at_the_timeout(client):
    add_all(client, [(109, e, KEY, entry(109, e)) for e in range(3)])  # LAC 1
    assert client.read_lac(109, master_key=KEY).last_add_confirmed == 1
    timed_out = client.read_lac(109, previous=1, timeout=0.3, master_key=KEY)
    assert (timed_out.status, timed_out.last_add_confirmed) == (BookieStatus.OK, 1)
    answers = []
    poller = threading.Thread(
        target=lambda: answers.append(client.read_lac(109, previous=1, timeout=60, master_key=KEY)))
    poller.start()
    try:
        add_all(client, [(109, 3, KEY, entry(109, 3))])  # its header carries LAC 2
    finally:
        poller.join(90)
    assert not poller.is_alive()
    assert answers[0].status == BookieStatus.OK and answers[0].last_add_confirmed == 2


def test_concurrent_streams_are_group_committed(client, shared_bookie):
    """More than one record per journal fsync under concurrency (from /metrics)."""
    before = scrape(shared_bookie.metrics_url)

    def writer(ledger_id: int) -> None:
        assert all(result.ok for result in add_all(client, [(ledger_id, e, KEY, entry(ledger_id, e))
                                                            for e in range(300)]))

    threads = [threading.Thread(target=writer, args=(110 + n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    after = scrape(shared_bookie.metrics_url)
    records = after["bookie_journal_batch_records_sum"] - before["bookie_journal_batch_records_sum"]
    fsyncs = after["bookie_journal_batch_records_count"] - before["bookie_journal_batch_records_count"]
    assert records >= 1200 and 0 < fsyncs < records


def test_metrics_endpoint_exposes_the_bookie_metrics(client, shared_bookie):
    add_all(client, [(120, 0, KEY, entry(120, 0))])
    client.read(120, 0, master_key=KEY)
    samples = scrape(shared_bookie.metrics_url)
    for name in ('bookie_add_requests_total{status="OK"}', 'bookie_read_requests_total{status="OK"}',
                 "bookie_add_latency_seconds_count", "bookie_read_latency_seconds_count",
                 "bookie_journal_fsync_latency_seconds_count", "bookie_journal_batch_records_count",
                 "bookie_bytes_written_total", "bookie_bytes_read_total", "bookie_inflight_adds"):
        assert name in samples, name
    assert samples['bookie_add_requests_total{status="OK"}'] >= 1
    assert samples["bookie_bytes_written_total"] >= len(entry(120, 0))


def test_a_cancelled_stream_is_ended_and_its_thread_joined_on_the_bookie(stub, shared_bookie):
    release = threading.Event()

    def requests():
        yield pb.AddBatch(adds=[pb.AddRequest(ledger_id=130, entry_id=0, master_key=KEY, body=entry(130, 0))])
        release.wait(30)

    call = stub.AddStream(requests())
    try:
        assert next(call).results[0].status == pb.OK
        assert scrape(shared_bookie.metrics_url)["bookie_add_streams"] >= 1
        call.cancel()
    finally:
        release.set()
    wait_until(lambda: scrape(shared_bookie.metrics_url)["bookie_add_streams"] == 0, 30,
               "the bookie to end the cancelled stream")
