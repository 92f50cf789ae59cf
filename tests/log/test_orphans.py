"""Orphan ledgers (created for a stream, in no log) are found and deleted; committed and young ones never are."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pyspark_ledger.errors import InvalidArgumentError, NoSuchKeyError, NoSuchLedgerError
from pyspark_ledger.log.log_transitions import add_ledger, mark_orphans
from pyspark_ledger.log.orphans import DEFAULT_MIN_AGE_S
from pyspark_ledger.log.stream_store import read_stream, update_stream
from pyspark_ledger.testing.bookies import _REPO_ROOT, child_env
from pyspark_ledger.testing.metadata_hooks import HookedStore
from tests.log.conftest import PASSWORD, wait_until
from tests.stream_ledgers import closed_ledger, exists

TWO_HOURS_MS = 2 * 3600 * 1000


def later_clock():
    """A wall clock two hours ahead: every ledger created now is older than the default minimum age."""
    return lambda: int(time.time() * 1000) + TWO_HOURS_MS




def read(streams, stream, partition):
    return [entry.data for entry in streams.open_reader(stream, partition).entries()]


class StreamSetHook(HookedStore):
    """A store that runs a one-shot ``hook()`` just before its next compare-and-set of a stream record."""

    def __init__(self, inner, hook=None):
        super().__init__(inner)
        self.hook = hook

    def set(self, key, value, expected_version):
        hook, self.hook = self.hook, None
        if hook is not None and key.startswith("streams/"):
            hook()
        return super().set(key, value, expected_version)


@pytest.mark.parametrize("metadata_uri", ["sqlite", "zookeeper"], indirect=True)
def test_uncommitted_ledgers_are_collected_committed_and_young_ones_never(make_streams, stream_name):
    streams = make_streams()
    streams.create_stream(stream_name, 2)
    streams.create_stream(stream_name + "-other", 1)
    committed = closed_ledger(streams, stream_name, 0, b"kept")
    assert streams.commit_ledgers(stream_name, "query-1", 0, {0: [committed]}).committed
    closed_orphan = closed_ledger(streams, stream_name, 1, b"lost", b"lost")
    open_orphan = streams.create_ledger(stream_name, 0)
    open_orphan.append(b"never closed")
    other_stream = closed_ledger(streams, stream_name + "-other", 0, b"other")
    untagged = streams.client.create_ledger(3, 3, 2, password=PASSWORD)
    untagged.close()

    now = streams.collect_orphans(stream_name)  # the real clock: everything is younger than an hour
    assert (now.orphans, now.deleted, set(now.young)) == ((), frozenset(), {closed_orphan, open_orphan.ledger_id})

    later = make_streams(now_ms=later_clock())
    dry = later.collect_orphans(stream_name, dry_run=True)
    assert [(o.ledger_id, o.partition, o.state, o.entries) for o in dry.orphans] == [
        (closed_orphan, 1, "CLOSED", 2), (open_orphan.ledger_id, 0, "OPEN", -1)]
    assert dry.deleted == frozenset() and dry.dry_run and min(o.age_s for o in dry.orphans) >= DEFAULT_MIN_AGE_S
    assert all(exists(streams, i) for i in (closed_orphan, open_orphan.ledger_id))

    swept = later.collect_orphans(stream_name)
    assert swept.deleted == {closed_orphan, open_orphan.ledger_id} and not swept.dry_run
    assert not exists(streams, closed_orphan) and not exists(streams, open_orphan.ledger_id)
    assert all(exists(streams, i) for i in (committed, other_stream, untagged.ledger_id))
    assert read(streams, stream_name, 0) == [b"kept"] and read(streams, stream_name, 1) == []
    assert read_stream(streams.context.store, stream_name).value.garbage == ()  # deleted and forgotten
    assert later.collect_orphans(stream_name).orphans == ()


def test_a_task_killed_mid_write_leaves_an_open_orphan_that_is_collected(make_streams, metadata_uri, stream_name,
                                                                         tmp_path):
    streams = make_streams()
    streams.create_stream(stream_name, 1)
    stderr_path = tmp_path / "child.stderr"
    with open(stderr_path, "w") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "tests.log.orphan_task_child", metadata_uri, stream_name],
                                 stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, env=child_env(),
                                 cwd=str(_REPO_ROOT), text=True)
        try:
            line = child.stdout.readline().strip()
            assert line == "blocked", f"the write task did not start: {line!r} {stderr_path.read_text()[-2000:]}"
            orphans = wait_until(lambda: streams.collect_orphans(stream_name, 0, dry_run=True).orphans,
                                 what="the task's ledger")
        finally:
            child.kill()
            child.wait(30)
    assert child.returncode == -9
    assert [(o.state, o.partition) for o in orphans] == [("OPEN", 0)]
    swept = streams.collect_orphans(stream_name, min_age_s=0)
    assert swept.deleted == {orphans[0].ledger_id} and not exists(streams, orphans[0].ledger_id)
    assert read(streams, stream_name, 0) == []


def test_a_commit_that_lands_first_keeps_its_ledgers(make_streams, stream_name):
    streams = make_streams()
    streams.create_stream(stream_name, 1)
    ledger = closed_ledger(streams, stream_name, 0, b"raced")
    hooked = make_streams(store_wrapper=StreamSetHook, now_ms=later_clock())
    # the sweep has listed the ledger as an orphan; the commit lands just before the sweep's compare-and-set
    hooked.context.store.hook = lambda: streams.commit_ledgers(stream_name, "query-1", 0, {0: [ledger]})
    swept = hooked.collect_orphans(stream_name)
    assert [o.ledger_id for o in swept.orphans] == [ledger] and swept.deleted == frozenset()
    assert exists(streams, ledger) and read(streams, stream_name, 0) == [b"raced"]
    assert streams.last_committed_batch(stream_name, "query-1") == 0


@pytest.mark.parametrize("metadata_uri", ["sqlite", "zookeeper"], indirect=True)
@pytest.mark.parametrize("sweep_step", ["marked", "deleted"])
def test_a_commit_that_loses_the_race_fails_and_commits_nothing(make_streams, stream_name, sweep_step):
    streams = make_streams()
    streams.create_stream(stream_name, 1)
    ledger = closed_ledger(streams, stream_name, 0, b"late")
    sweeper = make_streams(now_ms=later_clock())

    def sweep():  # runs after the commit read the record and checked its ledger, before its compare-and-set
        if sweep_step == "marked":  # the sweep died between marking and deleting
            update_stream(sweeper.context.store, stream_name, lambda record: mark_orphans(record, [ledger]))
        else:
            assert sweeper.collect_orphans(stream_name).deleted == {ledger}

    committer = make_streams(store_wrapper=lambda store: StreamSetHook(store, sweep))
    with pytest.raises((InvalidArgumentError, NoSuchLedgerError)) as failure:
        committer.commit_ledgers(stream_name, "query-1", 0, {0: [ledger]})
    assert str(ledger) in str(failure.value)
    assert read(streams, stream_name, 0) == [] and streams.last_committed_batch(stream_name, "query-1") is None
    if sweep_step == "marked":
        assert "orphan" in str(failure.value)
        assert sweeper.collect_garbage(stream_name) == {ledger}  # the next retention pass finishes the sweep
    assert not exists(streams, ledger)


def test_a_ledger_marked_as_an_orphan_never_enters_a_log(streams, stream_name):
    streams.create_stream(stream_name, 1)
    with streams.open_writer(stream_name, 0) as writer:
        writer.append(b"one")
        held = writer.ledger_id
    record = read_stream(streams.context.store, stream_name).value
    assert mark_orphans(record, [held]) is None  # a ledger a log holds is never marked
    stray = closed_ledger(streams, stream_name, 0, b"stray")
    update_stream(streams.context.store, stream_name, lambda current: mark_orphans(current, [stray, stray]))
    record = read_stream(streams.context.store, stream_name).value
    assert record.garbage == (stray,)
    with pytest.raises(InvalidArgumentError, match="orphan"):
        add_ledger(record, 0, stray, record.partition(0).next_seq)  # a log writer's compare-and-set
    with pytest.raises(InvalidArgumentError, match="orphan"):
        streams.commit_ledgers(stream_name, "w", 0, {0: [stray]})  # a Spark commit
    assert read(streams, stream_name, 0) == [b"one"]


@pytest.mark.parametrize("min_age", [-1, float("nan"), float("inf"), True, "60"])
def test_a_bad_minimum_age_is_refused(streams, stream_name, min_age):
    streams.create_stream(stream_name, 1)
    with pytest.raises(InvalidArgumentError, match="min_age_s must be"):
        streams.collect_orphans(stream_name, min_age)


def test_sweeping_a_missing_stream_says_so(streams):
    with pytest.raises(NoSuchKeyError, match="does not exist"):
        streams.collect_orphans("no-such-stream", 0)
    with pytest.raises(InvalidArgumentError, match="stream name"):
        streams.collect_orphans("bad/name", 0)
