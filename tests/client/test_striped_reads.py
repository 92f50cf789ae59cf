"""Reads of striped ledgers (E > Qw) over fake bookies: one strided read per write set, fallback, order, errors,
speculative reads (docs/protocol.md L7)."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import BookieUnavailableError, CorruptEntryError, NoSuchEntryError
from pyspark_ledger.protocol.read_rules import ReadBatch
from pyspark_ledger.protocol.schedule import write_set_bookies
from tests.client.conftest import PASSWORD, wait_until

pytestmark = pytest.mark.bookies(5)


def data(index: int) -> bytes:
    return b"entry-%05d" % index


def closed_ledger(client, count: int, quorums=(5, 3, 2)):
    with client.create_ledger(*quorums, password=PASSWORD) as writer:
        futures = [writer.append_async(data(i)) for i in range(count)]
        [future.result(10) for future in futures]
    return writer


def reads_since(cluster, before: int) -> list[tuple]:
    return [request for request in cluster.requests[before:] if request[0] == "read"]


def read_until_error(reader, first: int = 0) -> tuple[list[int], BaseException | None]:
    got: list[int] = []
    try:
        for entry in reader.read(first):
            assert entry.data == data(entry.entry_id)
            got.append(entry.entry_id)
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        return got, exc
    return got, None


@pytest.mark.parametrize("quorums", [(5, 3, 2), (3, 2, 2), (4, 2, 1), (5, 1, 1)])
def test_each_write_set_is_asked_once_per_batch_for_its_entries(client, make_client, cluster, quorums):
    size = quorums[0]
    count = 2 * 20 * size  # two batches of E stripes of 20 entries
    writer = closed_ledger(client, count, quorums)
    ensemble = writer.metadata.current_fragment.bookies
    reader = make_client(seed=2, read_batch_entries=20).open_ledger(writer.ledger_id, PASSWORD)
    before = len(cluster.requests)
    assert [e.data for e in reader.read()] == [data(i) for i in range(count)]
    reads = reads_since(cluster, before)
    assert len(reads) == 2 * size, reads  # one read per stripe and batch
    for _, bookie, _, first, last, _ in reads:
        assert bookie == write_set_bookies(first, ensemble, quorums[1])[0]  # the first replica of its write set
        assert (last - first) % size == 0 and (last - first) // size + 1 == 20  # read_batch_entries per read
    assert {request[1] for request in reads} == set(ensemble), "every bookie shares the work"


def test_an_equal_write_quorum_stays_one_contiguous_read(client, make_client, cluster):
    writer = closed_ledger(client, 200, (3, 3, 2))
    reader = make_client(seed=2, read_batch_entries=100).open_ledger(writer.ledger_id, PASSWORD)
    before = len(cluster.requests)
    assert [e.data for e in reader.read()] == [data(i) for i in range(200)]
    assert [(r[3], r[4]) for r in reads_since(cluster, before)] == [(0, 99), (100, 199)]


def test_short_answers_go_on_within_their_stripe(client, make_client, cluster):
    writer = closed_ledger(client, 120)
    reader = make_client(seed=2, read_batch_entries=60, read_batch_bytes=5 * 300, read_ahead_batches=2
                         ).open_ledger(writer.ledger_id, PASSWORD)
    before = len(cluster.requests)
    assert [e.data for e in reader.read(1)] == [data(i) for i in range(1, 120)]
    reads = reads_since(cluster, before)
    assert 2 * 5 < len(reads) < 119, "stripes were continued in rounds, not entry by entry"
    starts = [r[3] for r in reads]
    assert len(starts) == len(set(starts)), "a round starts where the stripe's last answer stopped, never again"
    assert all((r[4] - r[3]) % 5 == 0 for r in reads)


def test_a_batch_holds_about_read_batch_bytes_however_many_entries_it_spans(client, make_client, cluster):
    with client.create_ledger(5, 3, 2, password=PASSWORD) as writer:
        futures = [writer.append_async(b"%04d" % i * 250) for i in range(300)]
        [future.result(10) for future in futures]
    reader = make_client(seed=2, read_batch_bytes=10_000).open_ledger(writer.ledger_id, PASSWORD)
    batch = ReadBatch(0, 299, writer.metadata.current_fragment.bookies)
    held = reader._fetch(batch, True).result.result(10)  # one batch of 300 entries of 1,000 bytes
    assert [entry.entry_id for entry in held] == list(range(len(held)))
    assert 5 <= len(held) <= 10 + 5, "stripes stop going on once the batch holds read_batch_bytes"
    assert [entry.data for entry in reader.read()] == [b"%04d" % i * 250 for i in range(300)]


def test_a_down_bookie_is_read_around(client, make_client, cluster):
    writer = closed_ledger(client, 150)
    cluster.set_down(writer.metadata.current_fragment.bookies[2])
    reader = make_client(seed=2, read_batch_entries=40).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [data(i) for i in range(150)]


def test_io_errors_of_a_bookie_are_read_around(client, make_client, cluster):
    writer = closed_ledger(client, 150)
    cluster.fail(writer.metadata.current_fragment.bookies[0], op="read", status="IO_ERROR")
    reader = make_client(seed=2, read_batch_entries=40).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [data(i) for i in range(150)]


def test_an_entry_no_replica_can_read_is_an_error_after_the_entries_before_it(client, make_client, cluster):
    writer = closed_ledger(client, 60)
    for bookie in write_set_bookies(23, writer.metadata.current_fragment.bookies, 3):
        cluster.fail(bookie, op="read", status="IO_ERROR", entry_id=23)
    reader = make_client(seed=2, read_batch_entries=40).open_ledger(writer.ledger_id, PASSWORD)
    got, error = read_until_error(reader, 20)  # a fake fails a whole read: make entry 23 the first of its stripe
    assert got == [20, 21, 22]
    assert isinstance(error, BookieUnavailableError) and not isinstance(error, NoSuchEntryError), error
    assert "entry 23" in str(error)


def test_corrupt_first_replicas_are_read_around(client, make_client, cluster):
    writer = closed_ledger(client, 50)
    ensemble = writer.metadata.current_fragment.bookies
    for entry_id in range(50):
        cluster.corrupt(write_set_bookies(entry_id, ensemble, 3)[0], writer.ledger_id, entry_id)
    reader = make_client(seed=2, read_batch_entries=20).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [data(i) for i in range(50)]


def test_every_replica_corrupt_is_a_corrupt_entry_error_after_the_entries_before_it(client, make_client, cluster):
    writer = closed_ledger(client, 30)
    for bookie in write_set_bookies(17, writer.metadata.current_fragment.bookies, 3):
        cluster.corrupt(bookie, writer.ledger_id, 17)
    reader = make_client(seed=2, read_batch_entries=30).open_ledger(writer.ledger_id, PASSWORD)
    got, error = read_until_error(reader)
    assert got == list(range(17)) and isinstance(error, CorruptEntryError), error
    assert [e.entry_id for e in reader.read(18)] == list(range(18, 30))


def test_explicit_absence_from_enough_replicas_is_still_no_such_entry(client, make_client, cluster):
    writer = closed_ledger(client, 30)
    replicas = write_set_bookies(12, writer.metadata.current_fragment.bookies, 3)
    for bookie in replicas[:2]:  # Qw - Qa + 1 = 2 explicit negatives
        cluster.fail(bookie, op="read", status="NO_SUCH_ENTRY", entry_id=12)
    reader = make_client(seed=2, read_batch_entries=30).open_ledger(writer.ledger_id, PASSWORD)
    got, error = read_until_error(reader, 10)  # entry 12 is then the first of its stripe
    assert got == [10, 11] and isinstance(error, NoSuchEntryError) and "entry 12" in str(error), error


def test_a_slow_bookie_gets_speculative_reads(client, make_client, cluster):
    writer = closed_ledger(client, 100)
    hang = cluster.hold(writer.metadata.current_fragment.bookies[1], op="read")
    reader = make_client(seed=2, speculative_read_delay_s=0.01, read_timeout_s=120.0).open_ledger(
        writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [data(i) for i in range(100)]
    assert hang.parked, "the slow bookie answered: no speculative read was needed"
    stats = reader.read_stats
    assert stats["speculative_reads"] >= 1 and stats["range_reads"] == 5 + stats["speculative_reads"], stats
    hang.release()
    wait_until(lambda: reader.read_stats["late_answers"] >= 1)  # the slow bookie's answer, unused


def test_L7_no_speculative_read_while_the_other_stripes_keep_answering(client, make_client, cluster):
    writer = closed_ledger(client, 100)
    for index, bookie in enumerate(writer.metadata.current_fragment.bookies):  # stripe r asks bookie r first
        cluster.delay(bookie, op="read", seconds=0.2 * (index + 1))  # one answer every 0.2 s, the last at 1 s
    reader = make_client(seed=2, speculative_read_delay_s=0.3, read_timeout_s=30.0).open_ledger(
        writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [data(i) for i in range(100)]
    assert reader.read_stats["speculative_reads"] == 0, "the reader's own answers arriving counted as slowness"


def test_L7_no_speculative_read_while_nothing_sent_after_it_has_answered(client, make_client, cluster):
    """A fresh reader sends its first batch with the batches it reads ahead (here 3 x 5 stripes), on bookies all
    equally slow: a replica is slow only once a read sent after it was answered, which none was."""
    writer = closed_ledger(client, 600)
    cluster.delay(None, op="read", seconds=0.25)  # every bookie, every read: five times the delay
    reader = make_client(seed=2, speculative_read_delay_s=0.05, read_timeout_s=30.0, read_batch_entries=20,
                         read_ahead_batches=3).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read()] == [data(i) for i in range(600)]
    stats = reader.read_stats
    assert stats["speculative_reads"] == 0 and stats["range_reads"] == 6 * 5, stats


def test_an_open_ledger_reads_to_its_last_add_confirmed(client, make_client, cluster):
    writer = client.create_ledger(5, 3, 2, password=PASSWORD)
    for index in range(40):
        writer.append(data(index))
    tail = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    lac = tail.last_add_confirmed
    assert 0 <= lac <= 39
    assert [e.data for e in tail.read()] == [data(i) for i in range(lac + 1)]
    with pytest.raises(NoSuchEntryError, match="beyond the readable end"):
        tail.read(0, lac + 1)
    writer.close()


def test_striped_reads_cross_fragments(client, make_client, cluster):
    cluster.add_bookie("bookie-5")
    writer = client.create_ledger(5, 3, 2, password=PASSWORD)
    for index in range(23):
        writer.append(data(index))
    cluster.set_down(writer.metadata.current_fragment.bookies[3])
    for index in range(23, 61):
        writer.append(data(index))
    writer.close()
    assert len(writer.metadata.fragments) == 2
    reader = make_client(seed=2, read_batch_entries=16).open_ledger(writer.ledger_id, PASSWORD)
    assert [e.data for e in reader.read(2)] == [data(i) for i in range(2, 61)]
