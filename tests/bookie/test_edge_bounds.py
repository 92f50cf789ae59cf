"""Every request's ids, counts and sizes are checked where they enter a real bookie (raw generated stubs).

One test per RPC sends values just inside and just outside each bound and expects BAD_REQUEST with a
message naming the limit; afterwards the bookie still serves. The largest accepted entry id is stored,
survives a checkpoint and a restart, and reads back.
"""
from __future__ import annotations

import grpc
import pytest

from bookie_server.limits import MAX_ENTRY_ID, MAX_LEDGER_ID, MAX_MASTER_KEY_BYTES, MAX_READ_ENTRIES
from pyspark_ledger.testing.bookies import BookieProcess
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc
from tests.bookie.conftest import KEY, entry

MAX_ENTRY_SIZE = 64 * 1024
BATCH_ADDS = 100


@pytest.fixture(scope="module")
def edge_bookie(tmp_path_factory):
    base = tmp_path_factory.mktemp("edge")
    bookie = BookieProcess(base / "bookie", f"sqlite:///{base}/metadata.db", checkpoint_interval=0,
                           max_entry_size=MAX_ENTRY_SIZE, max_batch_adds=BATCH_ADDS, max_batch_bytes=256 * 1024,
                           no_verify_new_ledgers=True)  # raw ledger ids without metadata: no ledger guard
    try:
        yield bookie.start()
    finally:
        bookie.kill()


@pytest.fixture
def stub(edge_bookie):
    channel = grpc.insecure_channel(edge_bookie.address, options=[("grpc.max_send_message_length", -1)])
    try:
        yield pb_grpc.BookieStub(channel)
    finally:
        channel.close()


def send_batch(stub, adds) -> dict[tuple[int, int], pb.AddResult]:
    results = {}
    for response in stub.AddStream(iter([pb.AddBatch(adds=adds)]), timeout=30):
        for result in response.results:
            results[(result.ledger_id, result.entry_id)] = result
    return results


def add(ledger_id, entry_id, key=KEY, body=None):
    if body is None:
        body = entry(ledger_id, entry_id) if 0 <= entry_id and ledger_id < 2**64 else b"x" * 64
    return pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=key, body=body)


def still_serves(stub, ledger_id: int = 900) -> None:
    results = send_batch(stub, [add(ledger_id, 0)])
    assert results[(ledger_id, 0)].status == pb.OK, results
    read = stub.Read(pb.ReadRequest(ledger_id=ledger_id, first_entry_id=0, last_entry_id=0, master_key=KEY),
                     timeout=10)
    assert read.status == pb.OK and read.entries[0].body == entry(ledger_id, 0)


def test_add_stream_bounds_every_field(stub):
    bad = {
        (501, MAX_ENTRY_ID + 1): f"limit of {MAX_ENTRY_ID}",
        (502, 2**62): f"limit of {MAX_ENTRY_ID}",
        (503, 2**63 - 1): f"limit of {MAX_ENTRY_ID}",
        (504, -1): "negative",
        (MAX_LEDGER_ID + 1, 0): "ledger ids are 0..",
        (2**64 - 1, 0): "ledger ids are 0..",
    }
    adds = [add(ledger_id, entry_id) for ledger_id, entry_id in bad]
    adds += [add(505, 0, key=b"k" * (MAX_MASTER_KEY_BYTES + 1)), add(506, 0, key=b""),
             add(507, 0, body=b"x" * 39), add(508, 0, body=b"x" * (MAX_ENTRY_SIZE + 1))]
    bad.update({(505, 0): f"limit of {MAX_MASTER_KEY_BYTES}",
                (507, 0): "shorter than the smallest", (508, 0): "--max-entry-size"})
    results = send_batch(stub, adds)
    assert results[(506, 0)].status == pb.UNAUTHORIZED  # a missing key is not malformed: it is unauthorized
    assert "needs its master key" in results[(506, 0)].message
    for key, words in bad.items():
        assert results[key].status == pb.BAD_REQUEST, (key, results[key])
        assert words in results[key].message, (key, results[key].message)
    still_serves(stub)


def test_the_largest_accepted_entry_id_is_stored_and_survives_a_restart(tmp_path):
    bookie = BookieProcess(tmp_path / "bookie", f"sqlite:///{tmp_path}/metadata.db", checkpoint_interval=0.2,
                           no_verify_new_ledgers=True)  # raw ledger ids without metadata: no ledger guard
    try:
        bookie.start()
        with grpc.insecure_channel(bookie.address) as channel:
            stub = pb_grpc.BookieStub(channel)
            results = send_batch(stub, [add(601, MAX_ENTRY_ID), add(602, 0), add(602, 1)])
            assert {result.status for result in results.values()} == {pb.OK}, results
        bookie.restart()
        with grpc.insecure_channel(bookie.address) as channel:
            stub = pb_grpc.BookieStub(channel)
            for ledger_id, entry_id in ((601, MAX_ENTRY_ID), (602, 0), (602, 1)):
                read = stub.Read(pb.ReadRequest(ledger_id=ledger_id, first_entry_id=entry_id,
                                                last_entry_id=entry_id, master_key=KEY), timeout=10)
                assert read.status == pb.OK, read
                assert read.entries[0].body == entry(ledger_id, entry_id)
            assert send_batch(stub, [add(603, 0)])[(603, 0)].status == pb.OK
    finally:
        bookie.kill()


def test_a_batch_over_the_add_count_ends_the_stream_naming_the_limit(stub):
    adds = [add(510, index) for index in range(BATCH_ADDS + 1)]
    with pytest.raises(grpc.RpcError) as raised:
        send_batch(stub, adds)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"limit of {BATCH_ADDS} adds per batch (--max-batch-adds)" in raised.value.details()
    results = send_batch(stub, adds[:BATCH_ADDS])  # exactly the limit is accepted
    assert {result.status for result in results.values()} == {pb.OK}
    still_serves(stub)


def test_a_message_over_the_receive_limit_is_refused_before_it_is_decoded(stub):
    adds = [add(511, index, body=b"x" * 60_000) for index in range(30)]  # ~1.8 MB > 256 KiB + 1 MiB margin
    with pytest.raises(grpc.RpcError) as raised:
        send_batch(stub, adds)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    still_serves(stub)


def test_read_bounds_every_field(stub):
    still_serves(stub, 520)
    cases = [
        (dict(first_entry_id=0, last_entry_id=MAX_READ_ENTRIES), f"limit of {MAX_READ_ENTRIES} entries per read"),
        (dict(first_entry_id=MAX_ENTRY_ID + 1, last_entry_id=MAX_ENTRY_ID + 1), f"limit of {MAX_ENTRY_ID}"),
        (dict(first_entry_id=0, last_entry_id=2**63 - 1), f"limit of {MAX_ENTRY_ID}"),
        (dict(first_entry_id=-5, last_entry_id=0), "negative"),
        (dict(first_entry_id=3, last_entry_id=2), "below first_entry_id"),
        (dict(first_entry_id=0, last_entry_id=0, master_key=b"k" * 65), f"limit of {MAX_MASTER_KEY_BYTES}"),
    ]
    for fields, words in cases:
        reply = stub.Read(pb.ReadRequest(ledger_id=520, **fields), timeout=10)
        assert reply.status == pb.BAD_REQUEST and words in reply.message, (fields, reply)
    reply = stub.Read(pb.ReadRequest(ledger_id=MAX_LEDGER_ID + 1, first_entry_id=0, last_entry_id=0), timeout=10)
    assert reply.status == pb.BAD_REQUEST and "ledger ids are 0.." in reply.message
    reply = stub.Read(pb.ReadRequest(ledger_id=520, first_entry_id=0, last_entry_id=0, fence=True), timeout=10)
    assert reply.status == pb.UNAUTHORIZED and "needs its master key" in reply.message
    reply = stub.Read(pb.ReadRequest(ledger_id=520, first_entry_id=0, last_entry_id=MAX_READ_ENTRIES - 1,
                                     max_bytes=2**64 - 1, master_key=KEY), timeout=10)
    assert reply.status == pb.OK and len(reply.entries) == 1  # the widest range, and max_bytes capped
    still_serves(stub, 520)


def test_read_lac_bounds_every_field(stub):
    still_serves(stub, 530)
    for previous, words in ((-2, "below -1"), (MAX_ENTRY_ID + 1, f"limit of {MAX_ENTRY_ID}"),
                            (2**63 - 1, f"limit of {MAX_ENTRY_ID}")):
        reply = stub.ReadLac(pb.ReadLacRequest(ledger_id=530, has_previous=True, previous_lac=previous,
                                               timeout_ms=10), timeout=10)
        assert reply.status == pb.BAD_REQUEST and words in reply.message, (previous, reply)
    reply = stub.ReadLac(pb.ReadLacRequest(ledger_id=2**64 - 1), timeout=10)
    assert reply.status == pb.BAD_REQUEST and "ledger ids are 0.." in reply.message
    reply = stub.ReadLac(pb.ReadLacRequest(ledger_id=530, master_key=b"k" * 65), timeout=10)
    assert reply.status == pb.BAD_REQUEST and f"limit of {MAX_MASTER_KEY_BYTES}" in reply.message
    reply = stub.ReadLac(pb.ReadLacRequest(ledger_id=530, has_previous=True, previous_lac=5,
                                           timeout_ms=300, master_key=KEY), timeout=10)
    assert reply.status == pb.OK  # the timeout ran out: a normal answer
    still_serves(stub, 530)


def test_write_lac_bounds_every_field(stub):
    still_serves(stub, 540)
    cases = [(dict(master_key=KEY, last_add_confirmed=-2), "below -1"),
             (dict(master_key=KEY, last_add_confirmed=MAX_ENTRY_ID + 1), f"limit of {MAX_ENTRY_ID}"),
             (dict(master_key=b"k" * 65, last_add_confirmed=0), f"limit of {MAX_MASTER_KEY_BYTES}")]
    for fields, words in cases:
        reply = stub.WriteLac(pb.WriteLacRequest(ledger_id=540, **fields), timeout=10)
        assert reply.status == pb.BAD_REQUEST and words in reply.message, (fields, reply)
    reply = stub.WriteLac(pb.WriteLacRequest(ledger_id=MAX_LEDGER_ID + 1, master_key=KEY, last_add_confirmed=0),
                          timeout=10)
    assert reply.status == pb.BAD_REQUEST and "ledger ids are 0.." in reply.message
    reply = stub.WriteLac(pb.WriteLacRequest(ledger_id=540, last_add_confirmed=0), timeout=10)
    assert reply.status == pb.UNAUTHORIZED and "needs its master key" in reply.message
    reply = stub.WriteLac(pb.WriteLacRequest(ledger_id=540, master_key=KEY, last_add_confirmed=0), timeout=10)
    assert reply.status == pb.OK and reply.last_add_confirmed == 0
    still_serves(stub, 540)
