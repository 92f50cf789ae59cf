"""Pure transitions of the stream record: add a ledger, commit batches, truncate, stamp, delete."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidArgumentError, MetadataVersionConflictError, NoSuchKeyError
from pyspark_ledger.log import log_transitions as t
from pyspark_ledger.log.log_metadata import DELETING, MAX_WRITERS, LedgerRef, Replication, decode, encode
from pyspark_ledger.log.positions import LogPosition


def stream(partitions: int = 2):
    return t.new_stream("s", partitions, Replication(), None, "uid", 1000)


def with_ledgers(record, partition, *ids):
    for ledger_id in ids:
        record, _ = t.add_ledger(record, partition, ledger_id, record.partition(partition).next_seq)
    return record


def test_new_stream_is_empty():
    record = stream(3)
    assert record.partition_count == 3 and all(p.next_seq == 0 and not p.ledgers for p in record.partitions)
    assert record.state == t.ACTIVE and record.writers == () and record.garbage == ()


def test_add_ledger_gives_consecutive_sequence_numbers_and_refuses_a_moved_tail():
    record = stream()
    record, seq0 = t.add_ledger(record, 0, 10, 0)
    record, seq1 = t.add_ledger(record, 0, 11, 1)
    assert (seq0, seq1) == (0, 1) and record.partition(0).ledger_ids == (10, 11)
    assert record.partition(1).ledger_ids == ()
    with pytest.raises(MetadataVersionConflictError, match="partition 0 of stream 's' changed.*2 is next, not 1"):
        t.add_ledger(record, 0, 12, 1)
    with pytest.raises(InvalidArgumentError, match="ledger 10 is already part"):
        t.add_ledger(record, 1, 10, 0)


def test_commit_batch_appends_in_order_once_per_writer_and_batch():
    record = with_ledgers(stream(), 0, 1)
    committed = t.commit_batch(record, "q", 0, {0: (5, 6), 1: (7,)}, 2000)
    assert committed.partition(0).ledger_ids == (1, 5, 6) and committed.partition(1).ledger_ids == (7,)
    assert committed.partition(0).ledgers[1] == LedgerRef(5, 2000)  # closed when committed: sealed now
    assert committed.last_batch("q") == 0
    assert t.commit_batch(committed, "q", 0, {0: (8,)}, 3000) is None  # a retried batch: nothing changes
    again = t.commit_batch(committed, "other", 0, {0: (8,)}, 3000)
    assert again.partition(0).ledger_ids == (1, 5, 6, 8) and again.last_batch("other") == 0
    later = t.commit_batch(again, "q", 3, {}, 4000)  # an empty batch still records its id
    assert later.last_batch("q") == 3 and t.commit_batch(later, "q", 2, {1: (9,)}, 5000) is None


def test_commit_refuses_ledgers_already_in_the_stream_or_truncated():
    record = t.commit_batch(stream(), "q", 0, {0: (5,)}, 1)
    with pytest.raises(InvalidArgumentError, match="ledger 5 .*already in stream 's'"):
        t.commit_batch(record, "q", 1, {1: (5,)}, 2)
    truncated = t.truncate_through(record, 0, 0, 3)
    with pytest.raises(InvalidArgumentError, match="ledger 5"):
        t.commit_batch(truncated, "q", 1, {1: (5,)}, 2)


def test_writers_are_bounded_and_the_oldest_commit_is_forgotten_first():
    record = stream()
    for index in range(MAX_WRITERS + 5):
        record = t.commit_batch(record, f"w{index}", 0, {}, 1)
    assert len(record.writers) == MAX_WRITERS
    assert record.last_batch("w0") is None and record.last_batch(f"w{MAX_WRITERS + 4}") == 0
    record = t.commit_batch(record, "w5", 1, {}, 1)  # a recommitting writer moves to the newest end
    assert record.writers[-1] == ("w5", 1) and len(record.writers) == MAX_WRITERS


def test_commits_not_remembered_leave_the_writers_alone_and_are_keyed_by_their_ledgers():
    record = t.commit_batch(stream(), "query-s", 4, {0: (1,)}, 1)
    for index in range(MAX_WRITERS + 5):
        record = t.commit_batch(record, f"batch-{index}", 0, {1: (100 + index,)}, 1, remember_writer=False)
    assert record.writers == (("query-s", 4),) and len(record.partition(1).ledgers) == MAX_WRITERS + 5
    assert t.commit_batch(record, "query-s", 4, {0: (9,)}, 1) is None  # the streaming replay is still a no-op
    assert t.already_committed(record, "batch-0", 0, {1: (100,)}, remember_writer=False)
    assert t.commit_batch(record, "batch-0", 0, {1: (100,)}, 1, remember_writer=False) is None  # retried: no-op
    assert not t.already_committed(record, "batch-x", 0, {}, remember_writer=False)
    with pytest.raises(InvalidArgumentError, match="ledger 100 .*already in stream"):
        t.commit_batch(record, "batch-0", 0, {1: (100, 7)}, 1, remember_writer=False)  # half of it is new


def test_truncate_through_drops_a_prefix_keeps_sequence_numbers_and_lists_garbage():
    record = with_ledgers(stream(), 0, 10, 11, 12)
    cut = t.truncate_through(record, 0, 1, 99)
    part = cut.partition(0)
    assert part.first_seq == 2 and part.ledger_ids == (12,) and part.next_seq == 3
    assert part.truncated_end == LogPosition(1, 100) and cut.garbage == (10, 11)
    assert t.truncate_through(cut, 0, 1, 99) == cut  # applying it again changes nothing
    everything = t.truncate_through(cut, 0, 2, 4)
    assert everything.partition(0).ledgers == () and everything.partition(0).next_seq == 3
    assert everything.garbage == (10, 11, 12)
    record, seq = t.add_ledger(everything, 0, 13, 3)
    assert seq == 3  # never reused
    with pytest.raises(InvalidArgumentError, match="no ledger with sequence number 7"):
        t.truncate_through(record, 0, 7, 0)
    assert t.forget_garbage(record, {10, 12}).garbage == (11,)


def test_stamp_sealed_only_fills_unknown_stamps_of_the_named_ledger():
    record = t.commit_batch(with_ledgers(stream(), 0, 10, 11), "q", 0, {0: (12,)}, 500)
    stamped = t.stamp_sealed(record, 0, {0: (10, 900), 1: (99, 900), 2: (12, 900)})
    assert [ref.sealed_ms for ref in stamped.partition(0).ledgers] == [900, 0, 500]


def test_mark_deleting_moves_every_ledger_to_garbage_and_stops_changes():
    record = t.commit_batch(with_ledgers(stream(), 0, 10), "q", 0, {1: (12,)}, 1)
    record = t.truncate_through(record, 0, 0, 5)
    deleting = t.mark_deleting(record)
    assert deleting.state == DELETING and sorted(deleting.garbage) == [10, 12]
    assert all(not part.ledgers for part in deleting.partitions)
    assert decode(encode(deleting), "s") == deleting
    for change in (lambda r: t.add_ledger(r, 0, 20, 1), lambda r: t.commit_batch(r, "q", 5, {}, 1),
                   lambda r: t.add_partitions(r, 3), lambda r: t.set_schema(r, b"x")):
        with pytest.raises(NoSuchKeyError, match="stream 's' is being deleted"):
            change(deleting)


def test_add_partitions_grows_only():
    record = t.add_partitions(stream(2), 4)
    assert record.partition_count == 4 and record.partition(3).next_seq == 0
    with pytest.raises(InvalidArgumentError, match="can be added, not removed"):
        t.add_partitions(record, 3)


def test_set_schema_stores_once_and_refuses_a_different_one_unless_replacing():
    record = t.set_schema(stream(), b"one")
    assert record.schema == b"one" and t.set_schema(record, b"one") is None
    with pytest.raises(InvalidArgumentError, match="already has a different schema; pass replace=True"):
        t.set_schema(record, b"two")
    assert t.set_schema(record, b"two", replace_existing=True).schema == b"two"
