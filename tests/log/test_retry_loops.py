"""Whole operations that start again after a conflict take a RetryPolicy: each one's conflict, scripted.

Opening a log writer (docs/protocol.md G1), deleting a stream, reading the logs
of a stream and overwriting a stream each meet another client once (on real
bookies and a real SQLite store); the operation starts again after one pause of
its policy, slept on an injected ``sleep`` (no real waiting), and ends as if the
other client had come first. Running out of attempts names the stream.
"""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import LedgerError, LedgerFencedError, MetadataError
from pyspark_ledger.log import log_views, streams as stream_ops
from pyspark_ledger.log.commits import COMMITTED
from pyspark_ledger.log.log_metadata import stream_key
from pyspark_ledger.log.log_writer import open_log_writer
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.metadata.update_loop import RetryPolicy
from pyspark_ledger.spark.sink_overwrite import commit_replacing
from pyspark_ledger.testing.metadata_hooks import HookedStore
from tests.log.conftest import payload


def no_sleep(attempts: int = 5) -> tuple[RetryPolicy, list[float]]:
    slept: list[float] = []
    return RetryPolicy(attempts=attempts, sleep=slept.append), slept


def before_first(store: HookedStore, method: str, key: str, action) -> list[int]:
    """Run ``action()`` once, just before the first ``method`` (``set``/``delete``) of ``key`` through
    ``store``; returns the versions every such call expected."""
    expected: list[int] = []
    real = getattr(store, method)

    def racing(called_key, *args):
        if called_key == key:
            expected.append(args[-1])
            if len(expected) == 1:
                action()
        return real(called_key, *args)
    setattr(store, method, racing)
    return expected


def closed_ledgers(streams, stream: str, partition: int, count: int, entries: int = 3) -> list[int]:
    ids = []
    for _ in range(count):
        with streams.create_ledger(stream, partition) as writer:
            for index in range(entries):
                writer.append(payload(index))
        ids.append(writer.ledger_id)
    return ids


def test_opening_a_writer_after_another_added_a_ledger_first_fences_it_and_opens_again(
        streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    hooked = make_streams(store_wrapper=HookedStore)
    others = []
    expected = before_first(hooked.context.store, "set", stream_key(stream_name),
                            lambda: others.append(streams.open_writer(stream_name, 0)))
    policy, slept = no_sleep()
    writer = open_log_writer(hooked.context, stream_name, 0, retry=policy)
    try:
        assert len(slept) == 1 and expected[1] == expected[0] + 1  # the other writer's ledger, once
        assert writer.ledger_seq == 1 and writer.append(b"mine") == LogPosition(1, 0)
        with pytest.raises(LedgerFencedError):
            others[0].append(b"theirs")  # opening again fenced the writer that came first
    finally:
        writer.close()
        others[0].close()


def test_opening_a_writer_runs_out_of_attempts_naming_the_partition(streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    hooked = make_streams(store_wrapper=HookedStore)
    store, others = hooked.context.store, []
    real_set = store.set

    def always_first(key, value, version):  # another writer opens before each of this one's attempts
        if key == stream_key(stream_name):
            others.append(streams.open_writer(stream_name, 0))
        return real_set(key, value, version)
    store.set = always_first
    policy, slept = no_sleep(attempts=2)
    try:
        with pytest.raises(MetadataError, match=f"partition 0 of stream '{stream_name}' .* in 2 attempts"):
            open_log_writer(hooked.context, stream_name, 0, retry=policy)
        assert len(slept) == 1 and len(others) == 2
    finally:
        for other in others:
            try:
                other.close()
            except LedgerError:  # the earlier ones were fenced by the later ones
                pass


def test_deleting_a_stream_whose_record_changed_before_its_removal_reads_it_again(
        streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    hooked = make_streams(store_wrapper=HookedStore)
    inner = hooked.context.store.inner

    def touch():  # another client writes the record (same value): only its version moves
        stored = inner.get(stream_key(stream_name))
        inner.set(stream_key(stream_name), stored.value, stored.version)
    expected = before_first(hooked.context.store, "delete", stream_key(stream_name), touch)
    policy, slept = no_sleep()
    stream_ops.delete_stream(hooked.context, stream_name, retry=policy)
    assert len(slept) == 1 and len(expected) == 2 and expected[1] == expected[0] + 1
    assert stream_name not in streams.list_streams()


def test_deleting_a_stream_that_keeps_changing_gives_up_naming_it(streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    hooked = make_streams(store_wrapper=HookedStore)
    store = hooked.context.store
    real_delete = store.delete

    def always_moved(key, version=None):
        if key == stream_key(stream_name):
            stored = store.inner.get(key)
            store.inner.set(key, stored.value, stored.version)
        return real_delete(key, version)
    store.delete = always_moved
    policy, slept = no_sleep(attempts=3)
    with pytest.raises(MetadataError, match=f"stream '{stream_name}' kept changing while it was being deleted "
                                            r"\(3 attempts\)"):
        stream_ops.delete_stream(hooked.context, stream_name, retry=policy)
    assert len(slept) == 2
    store.delete = real_delete
    streams.delete_stream(stream_name)  # resumable: the stream marked DELETING is deleted now


def test_reading_the_logs_while_a_ledger_is_truncated_away_reads_the_record_again(
        streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    first, second = closed_ledgers(streams, stream_name, 0, 2)
    streams.commit_ledgers(stream_name, "w", 0, {0: [first, second]})
    hooked = make_streams(store_wrapper=HookedStore)
    store, truncated = hooked.context.store, []
    real_read = store.read_ledger

    def truncate_first(ledger_id):  # retention drops the first ledger between the record's read and its own
        if ledger_id == first and not truncated:
            truncated.append(streams.truncate_before(stream_name, 0, LogPosition(1, 0)))
            streams.collect_garbage(stream_name)
        return real_read(ledger_id)
    store.read_ledger = truncate_first
    policy, slept = no_sleep()
    logs = log_views.partition_logs(hooked.context, stream_name, retry=policy)
    assert len(slept) == 1 and truncated
    assert [(span.ledger_seq, span.ledger_id, span.lost) for span in logs[0].spans] == [(1, second, False)]


def test_overwriting_a_stream_whose_log_grew_meanwhile_reads_its_end_again(streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    old, grown, new = closed_ledgers(streams, stream_name, 0, 3)
    streams.commit_ledgers(stream_name, "old", 0, {0: [old]})
    hooked = make_streams(store_wrapper=HookedStore)
    expected = before_first(hooked.context.store, "set", stream_key(stream_name),
                            lambda: streams.commit_ledgers(stream_name, "other", 0, {0: [grown]}))
    policy, slept = no_sleep()
    result = commit_replacing(hooked.context, stream_name, "overwriter", 0, {0: [new]}, retry=policy)
    assert result.status == COMMITTED and len(slept) == 1
    assert expected[1] == expected[0] + 1  # then the garbage collection's write
    logs = streams.partition_logs(stream_name)
    assert [span.ledger_id for span in logs[0].spans] == [new]  # the ledger committed meanwhile went too
