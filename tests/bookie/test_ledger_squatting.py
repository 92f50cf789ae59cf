"""Issue 12 part 7: nobody can squat the next ledger ids with a first add or fence.

A bookie creates state for a ledger it has never seen only when the metadata store has the ledger and the
key matches the metadata's master_key_check (bookie_server.ledger_guard). Here: real bookies and a raw gRPC
caller with the generated stubs; the rule itself exhaustively against a scripted lookup."""
from __future__ import annotations

import itertools
import threading

import grpc
import pytest

from bookie_server.ledger_guard import BUSY, UNREACHABLE, LedgerGuard, decide, metadata_lookup
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import NoSuchLedgerError
from pyspark_ledger.metadata.model import Fragment, LedgerMetadata, master_key_check, master_key_matches
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.testing.bookies import BookieCluster
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc

PASSWORD = b"the writer's password"
KEY = master_key(PASSWORD)
WRONG = master_key(b"a squatter's guess")
SQUATTED = 20


def raw_fence(stub, ledger_id: int, key: bytes) -> pb.ReadResponse:
    return stub.Read(pb.ReadRequest(ledger_id=ledger_id, first_entry_id=0, last_entry_id=0, fence=True,
                                    master_key=key), timeout=30)


def raw_adds(stub, ledger_ids, key: bytes) -> dict[int, int]:
    """One AddBatch with entry 0 of each ledger (well-formed bodies, wrong key); status by ledger id."""
    codec = EntryCodec()
    adds = [pb.AddRequest(ledger_id=ledger_id, entry_id=0, master_key=key,
                          body=codec.encode(ledger_id, 0, -1, 0, b"squatter")) for ledger_id in ledger_ids]
    statuses = {}
    for response in stub.AddStream(iter([pb.AddBatch(adds=adds)]), timeout=30):
        for result in response.results:
            statuses[result.ledger_id] = result.status
    return statuses


@pytest.fixture
def cluster(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"
    bookies = BookieCluster(3, tmp_path / "bookies", uri, checkpoint_interval=0)
    bookies.start()
    try:
        yield bookies, uri
    finally:
        for bookie in bookies.bookies:
            bookie.kill()


def test_pre_fenced_and_pre_added_ids_do_not_stop_the_writer(cluster):
    bookies, uri = cluster
    channels = [grpc.insecure_channel(bookie.address) for bookie in bookies]
    stubs = [pb_grpc.BookieStub(channel) for channel in channels]
    try:
        with LedgerClient(uri) as client:
            first = client.create_ledger(3, password=PASSWORD)
            first.append(b"first")
            first.close()
            upcoming = range(first.ledger_id + 1, first.ledger_id + 1 + SQUATTED)
            for stub in stubs:  # the squatter fences and pre-adds the next ids everywhere, with wrong keys
                for ledger_id in upcoming:
                    assert raw_fence(stub, ledger_id, WRONG).status == pb.NO_SUCH_LEDGER
                assert raw_adds(stub, upcoming, WRONG) == {ledger_id: pb.NO_SUCH_LEDGER for ledger_id in upcoming}

            writers = [client.create_ledger(3, password=PASSWORD) for _ in range(3)]
            assert {writer.ledger_id for writer in writers} <= set(upcoming)
            for index, writer in enumerate(writers):
                for entry in range(5):
                    writer.append(b"ledger %d entry %d" % (index, entry))
                writer.close()
            for index, writer in enumerate(writers):
                with client.open_ledger(writer.ledger_id, PASSWORD) as reader:
                    assert [e.data for e in reader.read()] == [b"ledger %d entry %d" % (index, e) for e in range(5)]

            # an existing ledger: a wrong key is refused, whether or not the bookie holds state for it yet
            unwritten = client.create_ledger(3, password=PASSWORD)
            for stub in stubs:
                for ledger_id in (writers[0].ledger_id, unwritten.ledger_id):
                    reply = raw_fence(stub, ledger_id, WRONG)
                    assert reply.status == pb.UNAUTHORIZED, (ledger_id, reply)
                assert raw_adds(stub, [unwritten.ledger_id], WRONG) == {unwritten.ledger_id: pb.UNAUTHORIZED}
            unwritten.append(b"still mine")
            unwritten.close()
            # the legitimate recoverer (right key) may fence a bookie that never saw the ledger (docs/protocol.md F4)
            recovering = client.create_ledger(3, password=PASSWORD)
            assert raw_fence(stubs[0], recovering.ledger_id, KEY).status in (pb.OK, pb.NO_SUCH_ENTRY)
            assert raw_fence(stubs[0], recovering.ledger_id, KEY).fenced
    finally:
        for channel in channels:
            channel.close()


def test_ledgers_of_older_clients_fall_back_to_existence(cluster):
    bookies, uri = cluster
    with LedgerClient(uri) as client:
        store = client._ctx.store
        ledger_id = store.new_ledger_id()
        ensemble = tuple(bookie.bookie_id for bookie in bookies)
        store.create_ledger(LedgerMetadata(ledger_id, 3, 3, 2, (Fragment(0, ensemble),)))  # no master_key_check
    with grpc.insecure_channel(bookies[0].address) as channel:
        stub = pb_grpc.BookieStub(channel)
        assert raw_fence(stub, ledger_id, WRONG).fenced
        assert raw_fence(stub, ledger_id + 1000, WRONG).status == pb.NO_SUCH_LEDGER


CHECK = master_key_check(KEY)


@pytest.mark.parametrize("found, key, expected", [
    (UNREACHABLE, KEY, pb.IO_ERROR), (UNREACHABLE, WRONG, pb.IO_ERROR),
    (BUSY, KEY, pb.TOO_MANY_REQUESTS), (BUSY, WRONG, pb.TOO_MANY_REQUESTS),
    (None, KEY, pb.NO_SUCH_LEDGER), (None, WRONG, pb.NO_SUCH_LEDGER),
    ("", KEY, pb.OK), ("", WRONG, pb.OK),
    (CHECK, KEY, pb.OK), (CHECK, WRONG, pb.UNAUTHORIZED),
    ("garbage", KEY, pb.UNAUTHORIZED), ("sha256$zz$00", KEY, pb.UNAUTHORIZED),
])
def test_the_rule(found, key, expected):
    assert decide(found, key) == expected


def test_the_check_is_salted_and_verifies_only_its_key():
    assert master_key_check(KEY) != master_key_check(KEY)
    assert master_key_matches(KEY, CHECK) and not master_key_matches(WRONG, CHECK)
    assert KEY.hex() not in CHECK


def test_the_guard_asks_only_for_unknown_ledgers_caches_admitted_ones_and_never_absence():
    answers = {1: CHECK, 2: None, 3: UNREACHABLE}
    asked = []

    def lookup(ledger_id):
        asked.append(ledger_id)
        return answers[ledger_id]

    guard = LedgerGuard(lookup, lambda ledger_id: ledger_id == 9, "b", cache_size=1)
    ops = [(ledger_id, entry, key, b"", False)
           for ledger_id, entry, key in itertools.product([1, 2, 3, 9], [0, 1], [KEY, WRONG])]
    refused = []
    kept = guard.filter_adds(ops, refused)
    assert [(op[0], op[2]) for op in kept] == [(1, KEY), (1, KEY), (9, KEY), (9, WRONG), (9, KEY), (9, WRONG)]
    assert {(r[0], r[2]) for r in refused} == {(1, pb.UNAUTHORIZED), (2, pb.NO_SUCH_LEDGER), (3, pb.IO_ERROR)}
    assert sorted(asked) == [1, 2, 3] and 9 not in asked  # one lookup per unknown ledger of the batch
    assert guard.check(1, KEY)[0] == pb.OK and asked.count(1) == 1  # cached
    answers[2] = CHECK
    assert guard.check(2, KEY)[0] == pb.OK  # absence was not cached
    assert guard.check(1, KEY)[0] == pb.OK and asked.count(1) == 2  # cache of size 1: 1 was evicted by 2
    assert guard.check_fence(9, WRONG) == (pb.OK, "")  # known here: storage checks the key itself
    assert guard.filter_adds([(9, 0, WRONG, b"", False)], refused) == [(9, 0, WRONG, b"", False)]


def test_lookups_in_flight_are_bounded():
    release, started = threading.Event(), threading.Semaphore(0)

    def slow_lookup(ledger_id):
        started.release()
        release.wait(30)
        return CHECK

    guard = LedgerGuard(slow_lookup, lambda ledger_id: False, "b", max_lookups=2)
    answers = []
    threads = [threading.Thread(target=lambda n=n: answers.append(guard.check(n, KEY)[0])) for n in (1, 2)]
    for thread in threads:
        thread.start()
    assert started.acquire(timeout=10) and started.acquire(timeout=10)
    status, message = guard.check(3, KEY)  # waits LOOKUP_WAIT_S, then gives up
    assert status == pb.TOO_MANY_REQUESTS and "too many" in message
    release.set()
    for thread in threads:
        thread.join(10)
    assert answers == [pb.OK, pb.OK] and guard.check(3, KEY)[0] == pb.OK


def test_absence_is_believed_only_after_the_store_caught_up():
    # a ZooKeeper server may lag its leader: a ledger created through another server a moment ago is not in
    # its first read, but is in the read that syncs first; a lookup that stops at the first read would
    # refuse the legitimate writer's first add with NO_SUCH_LEDGER
    created = master_key_check(master_key(b"pw"))
    calls = []

    class LaggingStore:
        def read_ledger(self, ledger_id):
            calls.append("read")
            raise NoSuchLedgerError(f"no ledger {ledger_id}")

        def read_ledger_latest(self, ledger_id):
            calls.append("latest")
            return Versioned(LedgerMetadata(ledger_id=ledger_id, ensemble_size=1, write_quorum=1, ack_quorum=1,
                                            fragments=(Fragment(0, ("b",)),), master_key_check=created), 0)

    assert metadata_lookup(LaggingStore())(5) == created
    assert calls == ["read", "latest"]

    class EmptyStore(LaggingStore):
        def read_ledger_latest(self, ledger_id):
            calls.append("latest")
            raise NoSuchLedgerError(f"no ledger {ledger_id}")

    calls.clear()
    assert metadata_lookup(EmptyStore())(5) is None
    assert calls == ["read", "latest"]
