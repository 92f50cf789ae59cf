"""Exactly-once commits of closed ledgers (the Spark sink's commit) against real bookies."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.errors import (InvalidArgumentError, InvalidStateError,
                                   NoSuchKeyError, NoSuchLedgerError)
from pyspark_ledger.log.commits import ALREADY_COMMITTED, COMMITTED
from pyspark_ledger.log import log_transitions
from pyspark_ledger.log.log_metadata import stream_key
from pyspark_ledger.log.stream_store import read_stream
from tests.stream_ledgers import closed_ledger



def version(streams, stream):
    return streams.context.store.get(stream_key(stream)).version


def read(streams, stream, partition):
    return [entry.data for entry in streams.open_reader(stream, partition).entries()]


def test_one_commit_appends_across_partitions_in_one_compare_and_set(streams, stream_name):
    streams.create_stream(stream_name, 3)
    a, b = closed_ledger(streams, stream_name, 0, b"a0", b"a1"), closed_ledger(streams, stream_name, 0, b"b0")
    c = closed_ledger(streams, stream_name, 2, b"c0")
    before = version(streams, stream_name)
    result = streams.commit_ledgers(stream_name, "query-1", 0, {0: [a, b], 2: [c]})
    assert (result.status, result.committed, dict(result.ledger_seqs)) == (COMMITTED, True, {0: (0, 1), 2: (0,)})
    assert version(streams, stream_name) == before + 1
    assert streams.last_committed_batch(stream_name, "query-1") == 0
    assert read(streams, stream_name, 0) == [b"a0", b"a1", b"b0"] and read(streams, stream_name, 2) == [b"c0"]
    assert read(streams, stream_name, 1) == []


def test_a_replayed_or_retried_batch_changes_nothing(streams, stream_name):
    streams.create_stream(stream_name, 2)
    first = closed_ledger(streams, stream_name, 0, b"x")
    assert streams.commit_ledgers(stream_name, "query-1", 7, {0: [first]}).committed
    before = version(streams, stream_name)
    replay = streams.commit_ledgers(stream_name, "query-1", 7, {0: [first]})  # the very same call again
    assert (replay.status, replay.committed) == (ALREADY_COMMITTED, False)
    retry = closed_ledger(streams, stream_name, 0, b"x")  # the batch ran again and wrote new ledgers
    assert streams.commit_ledgers(stream_name, "query-1", 7, {0: [retry]}).status == ALREADY_COMMITTED
    assert streams.commit_ledgers(stream_name, "query-1", 3, {1: [retry]}).status == ALREADY_COMMITTED  # older
    assert version(streams, stream_name) == before
    assert streams.abort_ledgers(stream_name, [first, retry]) == {retry}  # a committed ledger is never deleted
    with pytest.raises(NoSuchLedgerError):
        streams.client.ledger_metadata(retry)
    assert read(streams, stream_name, 0) == [b"x"] and read(streams, stream_name, 1) == []
    assert streams.last_committed_batch(stream_name, "query-1") == 7
    assert streams.last_committed_batch(stream_name, "other") is None


def test_concurrent_committers_each_commit_exactly_once_in_their_order(make_streams, stream_name):
    clients = [make_streams() for _ in range(4)]
    clients[0].create_stream(stream_name, 2)
    plan = {(w, batch): {w % 2: [closed_ledger(clients[w], stream_name, w % 2, b"w%d-b%d" % (w, batch))]}
            for w in range(4) for batch in range(4)}
    errors = []

    def commit_all(w):
        try:
            for batch in range(4):
                assert clients[w].commit_ledgers(stream_name, f"writer-{w}", batch, plan[(w, batch)]).committed
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=commit_all, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    for partition in (0, 1):
        rows = read(clients[0], stream_name, partition)
        assert sorted(rows) == sorted(b"w%d-b%d" % (w, b) for w in range(4) if w % 2 == partition for b in range(4))
        for w in range(partition, 4, 2):  # each writer's batches in the order it committed them
            mine = [row for row in rows if row.startswith(b"w%d-" % w)]
            assert mine == [b"w%d-b%d" % (w, b) for b in range(4)]
    assert [clients[1].last_committed_batch(stream_name, f"writer-{w}") for w in range(4)] == [3, 3, 3, 3]


def test_racing_commits_of_the_same_batch_commit_once(make_streams, stream_name):
    clients = [make_streams() for _ in range(3)]
    clients[0].create_stream(stream_name, 1)
    ledgers = [closed_ledger(client, stream_name, 0, b"attempt-%d" % i) for i, client in enumerate(clients)]
    barrier, results = threading.Barrier(3, timeout=60), {}

    def commit(i):
        barrier.wait()
        results[i] = clients[i].commit_ledgers(stream_name, "query", 0, {0: [ledgers[i]]})

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    winners = [i for i, result in results.items() if result.committed]
    assert len(results) == 3 and len(winners) == 1
    assert read(clients[0], stream_name, 0) == [b"attempt-%d" % winners[0]]
    losers = [ledgers[i] for i in range(3) if i not in winners]
    assert clients[0].abort_ledgers(stream_name, ledgers) == set(losers)


def test_batch_commits_do_not_evict_a_streaming_writer(streams, stream_name, monkeypatch):
    monkeypatch.setattr(log_transitions, "MAX_WRITERS", 3)  # the stream remembers 3 writers (1,000 for real)
    streams.create_stream(stream_name, 1)
    assert streams.commit_ledgers(stream_name, "query-s", 0, {0: [closed_ledger(streams, stream_name, 0, b"s0")]}
                                  ).committed
    batch_ledgers = [closed_ledger(streams, stream_name, 0, b"batch-%d" % i) for i in range(6)]
    for index, ledger in enumerate(batch_ledgers):  # six one-off (Spark batch) writes, one CAS each
        before = version(streams, stream_name)
        assert streams.commit_ledgers(stream_name, f"batch-{index}", 0, {0: [ledger]}, remember_writer=False).committed
        assert version(streams, stream_name) == before + 1
    assert read_stream(streams.context.store, stream_name).value.writers == (("query-s", 0),)
    replay = closed_ledger(streams, stream_name, 0, b"s0 again")
    assert not streams.commit_ledgers(stream_name, "query-s", 0, {0: [replay]}).committed  # still a no-op
    assert not streams.commit_ledgers(stream_name, "batch-5", 0, {0: [batch_ledgers[5]]},
                                      remember_writer=False).committed  # a one-off commit retried
    assert read(streams, stream_name, 0) == [b"s0"] + [b"batch-%d" % i for i in range(6)]
    for index in range(3):  # remembered writers do push it out: the memory the batch writes no longer use
        streams.commit_ledgers(stream_name, f"query-{index}", 0, {0: [closed_ledger(streams, stream_name, 0, b"q")]})
    assert streams.last_committed_batch(stream_name, "query-s") is None


def test_overwrite_truncates_then_commits(streams, stream_name):
    streams.create_stream(stream_name, 1)
    streams.commit_ledgers(stream_name, "job-1", 0, {0: [closed_ledger(streams, stream_name, 0, b"old")]})
    streams.truncate_all(stream_name)
    streams.commit_ledgers(stream_name, "job-2", 0, {0: [closed_ledger(streams, stream_name, 0, b"new")]})
    assert read(streams, stream_name, 0) == [b"new"]


def test_bad_commits_are_refused_with_clear_errors(streams, stream_name):
    streams.create_stream(stream_name, 2)
    other_stream = stream_name + "-other"
    streams.create_stream(other_stream, 1)
    committed = closed_ledger(streams, stream_name, 0, b"a")
    streams.commit_ledgers(stream_name, "q", 0, {0: [committed]})
    open_ledger = streams.create_ledger(stream_name, 0)
    foreign = closed_ledger(streams, other_stream, 0, b"f")
    fresh = closed_ledger(streams, stream_name, 1, b"b")
    cases = [
        ({0: [open_ledger.ledger_id]}, InvalidStateError,
         f"ledger {open_ledger.ledger_id} is OPEN, not CLOSED"),
        ({0: [foreign]}, InvalidArgumentError, f"created for stream '{other_stream}'"),
        ({1: [committed]}, InvalidArgumentError, f"ledger {committed} .*already in stream"),
        ({5: [fresh]}, InvalidArgumentError, "partition 5 does not exist"),
        ({0: [fresh], 1: [fresh]}, InvalidArgumentError, "listed twice"),
        ({0: [2**62]}, NoSuchLedgerError, str(2**62)),
    ]
    before = version(streams, stream_name)
    for ledgers, error, message in cases:
        with pytest.raises(error, match=message):
            streams.commit_ledgers(stream_name, "q", 1, ledgers)
    with pytest.raises(InvalidArgumentError, match="writer id"):
        streams.commit_ledgers(stream_name, "", 1, {})
    with pytest.raises(InvalidArgumentError, match="batch id"):
        streams.commit_ledgers(stream_name, "q", -1, {})
    with pytest.raises(NoSuchKeyError, match="does not exist"):
        streams.commit_ledgers("no-such-stream", "q", 1, {})
    assert version(streams, stream_name) == before
    open_ledger.close()
    assert streams.commit_ledgers(stream_name, "q", 1, {0: [open_ledger.ledger_id], 1: [fresh]}).committed
    assert read(streams, stream_name, 0) == [b"a"] and read(streams, stream_name, 1) == [b"b"]
    assert read_stream(streams.context.store, stream_name).value.last_batch("q") == 1
