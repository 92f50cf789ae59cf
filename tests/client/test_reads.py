"""Reads over fake bookies: docs/protocol.md L1-L3 and L5, range batching, speculative reads."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.errors import (BookieUnavailableError, CorruptEntryError, InvalidArgumentError,
                                   NoSuchEntryError, RecoveryError)
from tests.client.conftest import PASSWORD


def closed_ledger(client, count: int, quorums=(3, 3, 2), size: int = 10):
    with client.create_ledger(*quorums, password=PASSWORD) as writer:
        futures = [writer.append_async(bytes([i % 256]) * size) for i in range(count)]
        [future.result(10) for future in futures]
    return writer


def test_L1_answers_from_bookies_0_and_2_of_four_do_not_cover(client, make_client, cluster):
    writer = client.create_ledger(4, 3, 2, password=PASSWORD)
    for _ in range(5):
        writer.append(b"x")
    ensemble = writer.metadata.current_fragment.bookies
    cluster.set_down(ensemble[1])
    cluster.set_down(ensemble[3])
    with pytest.raises(BookieUnavailableError, match="cover every write quorum"):
        make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    with pytest.raises(RecoveryError, match="cannot fence"):
        make_client(seed=3).open_ledger(writer.ledger_id, PASSWORD, recovery=True)


def test_L2_no_such_ledger_plus_a_down_bookie_never_reads_as_empty(client, make_client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    a, b, c = writer.metadata.current_fragment.bookies
    cluster.hold_request(c, op="add")  # c never hears of the ledger: "no such ledger"
    for _ in range(4):
        writer.append(b"x")
    cluster.set_down(b)
    tail = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    assert tail.last_add_confirmed == 2  # from a; c's "no such ledger" did not make it -1
    cluster.set_down(a)
    with pytest.raises(BookieUnavailableError):  # c alone is no coverage: fail rather than say "empty"
        make_client(seed=3).open_ledger(writer.ledger_id, PASSWORD, recovery=False)


def test_L3_long_poll_with_a_bookie_down_never_regresses(make_client, cluster):
    # explicit LAC off: the tail must learn each LAC only from the next entry for the poll to time out
    writer = make_client(explicit_lac_interval_s=0).create_ledger(3, 3, 2, password=PASSWORD)
    for _ in range(3):
        writer.append(b"x")
    tail = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    assert tail.last_add_confirmed == 1
    cluster.set_down(writer.metadata.current_fragment.bookies[0])
    assert tail.wait_for_entry(2, timeout=0.3) is False and tail.last_add_confirmed == 1
    writer.append(b"y")  # an ensemble change replaces the down bookie; entry 3 carries LAC 2
    assert tail.wait_for_entry(2, timeout=10) is True and tail.last_add_confirmed >= 2
    assert len(writer.metadata.fragments) == 2
    writer.append(b"z")
    assert tail.read_last_add_confirmed() == 3
    assert [e.data for e in tail.read()] == [b"x", b"x", b"x", b"y"]  # entry 3 is in the new fragment


def test_L5_corrupt_replica_is_skipped(client, make_client, cluster):
    writer = closed_ledger(client, 10)
    first = writer.metadata.current_fragment.bookies
    for entry_id in range(10):
        cluster.corrupt(first[entry_id % 3], writer.ledger_id, entry_id)  # each entry's first replica
    reader = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [bytes([i]) * 10 for i in range(10)]


def test_L5_every_replica_corrupt_is_a_corrupt_entry_error(client, make_client, cluster):
    writer = closed_ledger(client, 3)
    for bookie in writer.metadata.current_fragment.bookies:
        cluster.corrupt(bookie, writer.ledger_id, 1)
    reader = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    with pytest.raises(CorruptEntryError, match="entry 1"):
        list(reader.read())
    assert [e.entry_id for e in reader.read(0, 0)] == [0]


def test_L5_slow_replica_gets_a_speculative_read(client, make_client, cluster):
    writer = closed_ledger(client, 6)
    slow = writer.metadata.current_fragment.bookies[0]
    hang = cluster.hold(slow, op="read")
    reader = make_client(seed=2, speculative_read_delay_s=0.01, read_timeout_s=120.0).open_ledger(
        writer.ledger_id, PASSWORD)
    assert [e.entry_id for e in reader.read(0, 0)] == [0]  # entry 0's first replica is the slow one
    assert hang.parked, "the slow replica answered: no speculative read was needed"
    hang.release()


def test_reads_are_batched_and_continue_after_short_answers(client, make_client, cluster):
    writer = closed_ledger(client, 40, size=100)
    reader = make_client(seed=2, read_batch_entries=16, read_batch_bytes=500, read_ahead_batches=2).open_ledger(
        writer.ledger_id, PASSWORD)
    before = len(cluster.requests)
    assert [e.entry_id for e in reader.read()] == list(range(40))
    reads = [r for r in cluster.requests[before:] if r[0] == "read"]
    assert len(reads) < 40, "every entry cost its own read"
    assert all(r[4] - r[3] < 16 for r in reads)


def test_striped_ledger_reads_every_entry(client, make_client, cluster):
    writer = closed_ledger(client, 25, quorums=(4, 2, 2))
    reader = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read(3, 24)] == [bytes([i]) * 10 for i in range(3, 25)]


def test_reads_cross_fragments(client, make_client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    for index in range(5):
        writer.append(b"a%d" % index)
    cluster.set_down(writer.metadata.current_fragment.bookies[1])
    for index in range(5, 10):
        writer.append(b"a%d" % index)
    writer.close()
    assert len(writer.metadata.fragments) == 2
    reader = make_client(seed=2, read_batch_entries=4).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [b"a%d" % i for i in range(10)]


def test_read_range_is_checked(client, make_client):
    writer = closed_ledger(client, 3)
    reader = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    with pytest.raises(NoSuchEntryError, match="beyond the readable end 2"):
        reader.read(0, 3)
    with pytest.raises(InvalidArgumentError, match="0 <= first <= last"):
        reader.read(2, 1)
    with pytest.raises(InvalidArgumentError):
        reader.wait_for_entry(-1)


def test_concurrent_readers_agree(client, make_client):
    writer = closed_ledger(client, 100)
    readers = [make_client(seed=s).open_ledger(writer.ledger_id, PASSWORD) for s in (2, 3)]
    results: list = [None, None]

    def read(index: int) -> None:
        results[index] = [(e.entry_id, e.data) for e in readers[index].read()]
    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results[0] == results[1] and len(results[0]) == 100
