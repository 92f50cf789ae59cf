"""Stream records change through the same loop as ledger metadata: each conflict, scripted on real SQLite."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import MetadataError, MetadataVersionConflictError, NoSuchKeyError
from pyspark_ledger.log import log_transitions as t
from pyspark_ledger.log.log_metadata import Replication, encode, stream_key
from pyspark_ledger.log.stream_store import create_stream_record, read_stream, update_stream
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.update_loop import RetryPolicy
from pyspark_ledger.testing.metadata_hooks import HookedStore

NAME = "clicks"


@pytest.fixture
def store(tmp_path):
    hooked = HookedStore(open_metadata_store(f"sqlite:///{tmp_path}/metadata.db", create=True))
    create_stream_record(hooked, t.new_stream(NAME, 2, Replication(), None, "uid", 1000))
    try:
        yield hooked
    finally:
        hooked.close()


def another_writer_first(store, change, times: int = 1) -> list[int]:
    """Before each of the next ``times`` compare-and-sets of the record, another client writes
    ``change(record)``; returns the versions the caller's attempts expected."""
    expected: list[int] = []
    real_set = store.set

    def racing_set(key, value, version):
        expected.append(version)
        if len(expected) <= times:
            stored = read_stream(store.inner, NAME)
            store.inner.set(key, encode(change(stored.value)), stored.version)
        return real_set(key, value, version)
    store.set = racing_set
    return expected


def add(partition: int, ledger_id: int):
    return lambda record: t.add_ledger(record, partition, ledger_id, record.partition(partition).next_seq)[0]


def test_a_change_that_lost_to_another_is_applied_again_on_the_new_record(store):
    expected = another_writer_first(store, add(1, 20))
    stored, changed = update_stream(store, NAME, lambda record: t.add_ledger(record, 0, 10, 0)[0])
    assert changed and expected == [0, 1] and stored.version == 2
    assert [part.ledger_ids for part in read_stream(store, NAME).value.partitions] == [(10,), (20,)]


def test_another_writer_adding_to_the_same_log_stops_this_one_without_a_write(store):
    expected = another_writer_first(store, add(0, 20))
    with pytest.raises(MetadataVersionConflictError, match="another writer added a ledger") as raised:
        update_stream(store, NAME, lambda record: t.add_ledger(record, 0, 10, 0)[0])
    assert raised.value.__cause__ is None  # the transition's own error, as it raised it
    assert expected == [0] and read_stream(store, NAME).value.partition(0).ledger_ids == (20,)


def test_a_change_another_client_already_made_is_not_written_again(store):
    expected = another_writer_first(store, lambda record: t.add_partitions(record, 3))
    stored, changed = update_stream(store, NAME, lambda record: None if record.partition_count == 3
                                    else t.add_partitions(record, 3))
    assert (changed, stored.version, stored.value.partition_count, expected) == (False, 1, 3, [0])


def test_retries_run_out_with_an_error_naming_the_stream(store):
    expected = another_writer_first(store, lambda record: t.stamp_sealed(record, 0, {}), times=10)
    slept: list[float] = []
    policy = RetryPolicy(attempts=3, backoff_base_s=0.001, backoff_cap_s=0.002, sleep=slept.append)
    with pytest.raises(MetadataError, match="stream 'clicks' lost 3 compare-and-sets") as raised:
        update_stream(store, NAME, add(0, 10), policy)
    assert not isinstance(raised.value, MetadataVersionConflictError)  # callers retry on those: not on this
    assert expected == [0, 1, 2] and len(slept) == 2 and all(0.0005 <= pause <= 0.002 for pause in slept)
    assert read_stream(store, NAME).value.partition(0).ledger_ids == ()


def test_a_record_deleted_meanwhile_is_reported_as_such(store):
    real_set = store.set

    def deleted_first(key, value, version):
        store.inner.delete(stream_key(NAME))
        return real_set(key, value, version)
    store.set = deleted_first
    with pytest.raises(NoSuchKeyError, match="was deleted while it was being changed"):
        update_stream(store, NAME, add(0, 10))
