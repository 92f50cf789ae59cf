"""The single writer of a partition's log against real bookies: docs/protocol.md G1 (two would-be writers),
G2 (rolling under load), G4 (fenced while closing), roll policies."""
from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from pyspark_ledger.errors import LedgerClosedError, LedgerFencedError, MetadataVersionConflictError, NoSuchLedgerError
from pyspark_ledger.log.log_transitions import add_ledger
from pyspark_ledger.log import log_writer
from pyspark_ledger.log.log_writer import RollPolicy, open_log_writer
from pyspark_ledger.log.positions import EARLIEST, LogPosition
from pyspark_ledger.log.stream_store import read_stream, update_stream
from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.testing.metadata_hooks import HookedStore
from tests.log.conftest import PASSWORD, payload, wait_until


class KeyGateStore(HookedStore):
    """Runs ``on_set(key)`` before each compare-and-set of a key and records (thread, outcome) in ``outcomes``."""

    def __init__(self, inner, on_set, outcomes: list) -> None:
        super().__init__(inner)
        self._on_set, self.outcomes = on_set, outcomes

    def set(self, key, value, expected_version):
        self._on_set(key)
        try:
            version = self.inner.set(key, value, expected_version)
        except MetadataVersionConflictError:
            self.outcomes.append((threading.current_thread().name, "conflict"))
            raise
        self.outcomes.append((threading.current_thread().name, "ok"))
        return version


def read_all(streams, stream, partition=0):
    return [(entry.position, entry.data) for entry in streams.open_reader(stream, partition, EARLIEST).entries()]


def tagged_ledgers(streams, stream):
    """Every ledger created for ``stream`` that still exists."""
    found = set()
    for ledger_id in streams.client.list_ledgers():
        try:
            md = streams.client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue
        if md.custom_metadata.get("stream") == stream.encode():
            found.add(ledger_id)
    return found


def log_with_two_live_writers(streams, stream):
    """A log whose last two ledgers are OPEN with live writers (G1: a writer may still be writing
    the second-to-last ledger while adding the last), after one CLOSED ledger. Returns the two writers."""
    streams.create_stream(stream, 1)
    first = streams.create_ledger(stream, 0)
    first.append(b"closed-0")
    first.close()
    streams.commit_ledgers(stream, "setup", 0, {0: [first.ledger_id]})
    old = streams.open_writer(stream, 0)
    older_entries = [old.append(b"old-%d" % i) for i in range(3)]
    newest = streams.create_ledger(stream, 0)
    update_stream(streams.context.store, stream, lambda r: add_ledger(r, 0, newest.ledger_id, 2)[0])
    assert newest.append(b"newest-0") == 0
    assert [p.ledger_seq for p in older_entries] == [1, 1, 1]
    return old, newest


def race_to_open(make_streams, stream, is_leader=None):
    """Two clients open partition 0 at once: both read the same log version before either writes it."""
    barrier, outcomes, waited = threading.Barrier(2, timeout=60), [], set()

    def on_set(key):
        name = threading.current_thread().name
        if name not in waited:
            waited.add(name)
            barrier.wait()

    clients = {name: make_streams(store_wrapper=lambda s: KeyGateStore(s, on_set, outcomes)) for name in "AB"}
    writers, errors = {}, {}

    def open_as(name):
        try:
            writers[name] = clients[name].open_writer(stream, 0, is_leader=is_leader)
        except Exception as exc:  # noqa: BLE001 - inspected by the test
            errors[name] = exc

    threads = [threading.Thread(target=open_as, args=(name,), name=name) for name in "AB"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return writers, errors, outcomes


@pytest.mark.parametrize("metadata_uri", ["sqlite", "zookeeper"], indirect=True)
def test_g1_two_would_be_writers_only_one_can_write(streams, make_streams, stream_name):
    old, newest = log_with_two_live_writers(streams, stream_name)
    writers, errors, outcomes = race_to_open(make_streams, stream_name)
    assert not errors
    # only one won the CAS; the other lost it, started again (fencing the winner's ledger) and won its retry
    # (the two first outcomes are recorded after their CAS returned, so either may be recorded first)
    loser_of_the_race = next(name for name, outcome in outcomes if outcome == "conflict")
    first_winner = "B" if loser_of_the_race == "A" else "A"
    assert sorted(outcomes[:2]) == sorted([(first_winner, "ok"), (loser_of_the_race, "conflict")])
    assert outcomes[2:] == [(loser_of_the_race, "ok")]
    early, last = writers[first_winner], writers[loser_of_the_race]
    assert (early.ledger_seq, last.ledger_seq) == (3, 4)
    for fenced in (old, newest, early):  # every ledger that was the last or second-to-last when opening
        with pytest.raises(LedgerFencedError):
            fenced.append(b"too late")
    for ledger_id in (old.ledger_id, newest.ledger_id, early.ledger_id):
        assert streams.client.ledger_metadata(ledger_id).state == CLOSED
    assert last.append(b"winner") == LogPosition(4, 0)
    last.close()
    record = read_stream(streams.context.store, stream_name).value
    assert tagged_ledgers(streams, stream_name) == set(record.partition(0).ledger_ids)  # the race left no orphan
    assert [data for _, data in read_all(streams, stream_name)] == [
        b"closed-0", b"old-0", b"old-1", b"old-2", b"newest-0", b"winner"]


def test_g1_a_writer_that_is_no_longer_leader_is_refused(streams, make_streams, stream_name):
    old, newest = log_with_two_live_writers(streams, stream_name)
    writers, errors, outcomes = race_to_open(make_streams, stream_name, is_leader=lambda: False)
    (winner, won), = writers.items()
    (refused, error), = errors.items()
    assert sorted(outcomes) == sorted([(winner, "ok"), (refused, "conflict")])  # recorded in either order
    assert isinstance(error, LedgerFencedError) and "no longer the leader" in str(error)
    assert won.ledger_seq == 3 and won.append(b"winner") == LogPosition(3, 0)
    with pytest.raises(LedgerFencedError):
        old.append(b"x")
    won.close()
    record = read_stream(streams.context.store, stream_name).value
    assert record.partition(0).next_seq == 4
    assert tagged_ledgers(streams, stream_name) == set(record.partition(0).ledger_ids)


def test_reopening_fences_the_previous_writer_and_keeps_its_confirmed_entries(streams, stream_name):
    streams.create_stream(stream_name, 2)
    first = streams.open_writer(stream_name, 1)
    confirmed = [first.append(payload(i)) for i in range(25)]
    assert confirmed == [LogPosition(0, i) for i in range(25)]
    second = streams.open_writer(stream_name, 1)
    with pytest.raises(LedgerFencedError):
        first.append(payload(99))
    assert second.append(payload(25)) == LogPosition(1, 0)
    second.close()
    md = streams.client.ledger_metadata(first.ledger_id)
    assert (md.state, md.last_entry_id) == (CLOSED, 24)
    assert read_all(streams, stream_name, 1) == [(p, payload(i)) for i, p in enumerate(confirmed)] + [
        (LogPosition(1, 0), payload(25))]


def test_g2_rolling_under_load_no_gap_no_duplicate_and_readers_cross_boundaries(streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    writer = streams.open_writer(stream_name, 0, RollPolicy(max_entries=40))
    total, futures, tailed = 600, [], []
    tail_reader = make_streams().open_reader(stream_name, 0)

    def tail():
        while len(tailed) < total and tail_reader.wait_for_entries(timeout=30):
            tailed.extend((entry.position, entry.data) for entry in tail_reader.entries())

    roll_errors = []

    def roll_explicitly():
        try:
            for threshold in (150, 300, 450):
                wait_until(lambda: len(futures) >= threshold, what=f"{threshold} appends")
                writer.roll()
        except Exception as exc:  # noqa: BLE001 - checked below
            roll_errors.append(exc)

    tailer, roller = threading.Thread(target=tail), threading.Thread(target=roll_explicitly)
    tailer.start()
    roller.start()
    for chunk in range(0, total, 20):  # pipelined appends that keep going while ledgers roll
        batch = [writer.append_async(payload(i)) for i in range(chunk, chunk + 20)]
        futures.extend(batch)
        batch[0].result(60)
    positions = [future.result(60) for future in futures]
    roller.join(120)  # its last roll may come after the last append: the writer stays open until it is done
    writer.close()
    tailer.join(120)

    assert not roll_errors, roll_errors  # each explicit roll, made under load, succeeded
    assert all(a < b for a, b in zip(positions, positions[1:]))  # no duplicate, in append order
    per_ledger = defaultdict(list)
    for position in positions:
        per_ledger[position.ledger_seq].append(position.entry_id)
    assert sorted(per_ledger) == list(range(len(per_ledger))) and len(per_ledger) >= 4
    assert all(ids == list(range(len(ids))) for ids in per_ledger.values())  # no gap
    record = read_stream(streams.context.store, stream_name).value
    for seq, ref in record.partition(0).with_seqs():
        md = streams.client.ledger_metadata(ref.ledger_id)
        assert (md.state, md.last_entry_id) == (CLOSED, len(per_ledger.get(seq, [])) - 1)
    expected = [(position, payload(i)) for i, position in enumerate(positions)]
    assert tailed == expected
    assert read_all(streams, stream_name) == expected


@pytest.mark.parametrize("when", ["close", "roll"])
def test_g4_a_writer_fenced_while_closing_its_ledger_fails_to_close(make_streams, stream_name, when):
    stores = []
    wrap = lambda store: stores.append(HookedStore(store)) or stores[-1]  # noqa: E731
    writing, recovering = make_streams(store_wrapper=wrap), make_streams(store_wrapper=wrap)
    writer_store, recoverer_store = stores
    writing.create_stream(stream_name, 1)
    writer = writing.open_writer(stream_name, 0)
    confirmed = [writer.append(payload(i)) for i in range(20)]
    target = writer.ledger_id
    started, in_recovery, release, errors = threading.Event(), threading.Event(), threading.Event(), []

    def recover():
        try:
            recovering.client.open_ledger(target, PASSWORD, recovery=True)
        except Exception as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    recovery = threading.Thread(target=recover)

    def writer_about_to_close(metadata, version):  # the writer's closing CAS: a recoverer fences first
        if metadata.ledger_id == target and metadata.state == CLOSED and not started.is_set():
            started.set()
            recovery.start()
            assert in_recovery.wait(60)

    def recoverer_about_to_close(metadata, version):  # hold the recoverer's close until the writer failed
        if metadata.ledger_id == target and metadata.state == CLOSED:
            in_recovery.set()
            assert release.wait(60)

    writer_store.before_write(writer_about_to_close)
    recoverer_store.before_write(recoverer_about_to_close)
    try:
        with pytest.raises(LedgerFencedError, match=f"cannot close ledger {target}"):
            writer.roll() if when == "roll" else writer.close()
    finally:
        release.set()
        if started.is_set():
            recovery.join(120)
    assert not errors
    md = writing.client.ledger_metadata(target)
    assert (md.state, md.last_entry_id) == (CLOSED, 19)
    if when == "roll":
        with pytest.raises(LedgerFencedError, match="stopped"):
            writer.append(b"after")
        with pytest.raises(LedgerFencedError):
            writer.close()
    with pytest.raises(LedgerFencedError):  # close is idempotent: the same outcome again
        writer.close()
    assert read_all(writing, stream_name) == [(p, payload(i)) for i, p in enumerate(confirmed)]


def test_roll_policies_by_bytes_and_by_age(streams, stream_name):
    streams.create_stream(stream_name, 2)
    by_bytes = streams.open_writer(stream_name, 0, RollPolicy(max_bytes=1000))
    for index in range(15):
        by_bytes.append(payload(index, 100))
    wait_until(lambda: by_bytes.ledger_seq >= 1, what="a roll after 1000 bytes")
    by_bytes.close()
    now = [100.0]
    by_age = open_log_writer(streams.context, stream_name, 1, RollPolicy(max_age_s=60), clock=lambda: now[0])
    by_age.append(b"young")
    assert by_age.ledger_seq == 0
    now[0] += 61
    by_age.append(b"old")
    wait_until(lambda: by_age.ledger_seq == 1, what="a roll after 60 s")
    assert by_age.append(b"new") == LogPosition(1, 0)
    by_age.close()
    assert [data for _, data in read_all(streams, stream_name, 1)] == [b"young", b"old", b"new"]
    first_ledger = read_stream(streams.context.store, stream_name).value.partition(0).ledgers[0].ledger_id
    assert streams.client.ledger_metadata(first_ledger).length >= 1000


def test_close_during_a_roll_on_another_thread_waits_for_it_and_closes_the_new_ledger(streams, stream_name,
                                                                                      monkeypatch):
    streams.create_stream(stream_name, 1)
    writer = streams.open_writer(stream_name, 0)
    confirmed = [writer.append(payload(i)) for i in range(5)]
    creating, release, rolled = threading.Event(), threading.Event(), []
    create = log_writer.create_stream_ledger

    def held_create(*args, **kwargs):  # the roll's new ledger, held until close() has been called
        creating.set()
        assert release.wait(60)
        return create(*args, **kwargs)

    monkeypatch.setattr(log_writer, "create_stream_ledger", held_create)
    roller = threading.Thread(target=lambda: rolled.append(writer.roll()))
    roller.start()
    closer = threading.Thread(target=writer.close)
    try:
        assert creating.wait(30)
        closer.start()
        closer.join(0.5)
        assert closer.is_alive()  # it waits for the roll instead of closing the ledger the roll replaces
    finally:
        release.set()
        roller.join(60)
        if closer.ident is not None:
            closer.join(60)
    assert rolled == [1] and not closer.is_alive()
    record = read_stream(streams.context.store, stream_name).value
    states = {seq: streams.client.ledger_metadata(ref.ledger_id) for seq, ref in record.partition(0).with_seqs()}
    assert {seq: (md.state, md.last_entry_id) for seq, md in states.items()} == {0: (CLOSED, 4), 1: (CLOSED, -1)}
    with pytest.raises(LedgerClosedError, match="closed"):
        writer.roll()
    assert read_all(streams, stream_name) == [(p, payload(i)) for i, p in enumerate(confirmed)]


def test_a_roll_that_reaches_its_lock_after_close_creates_no_ledger(streams, stream_name):
    streams.create_stream(stream_name, 1)
    writer = streams.open_writer(stream_name, 0)
    confirmed = [writer.append(payload(i)) for i in range(3)]
    arrived, go, outcome = threading.Event(), threading.Event(), []

    class GatedLock:  # the roller passed its checks and waits at the roll lock until close() is done
        def __init__(self, lock) -> None:
            self.lock = lock

        def __enter__(self):
            if threading.current_thread().name == "roller":
                arrived.set()
                assert go.wait(60)
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    writer._roll_lock = GatedLock(writer._roll_lock)

    def roll() -> None:
        try:
            outcome.append(writer.roll())
        except LedgerClosedError as exc:
            outcome.append(exc)

    roller = threading.Thread(target=roll, name="roller")
    roller.start()
    try:
        assert arrived.wait(30)
        writer.close()
    finally:
        go.set()
        roller.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], LedgerClosedError)
    record = read_stream(streams.context.store, stream_name).value
    assert [seq for seq, _ in record.partition(0).with_seqs()] == [0]  # no ledger added after the close
    md = streams.client.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id) == (CLOSED, 2)
    assert read_all(streams, stream_name) == [(p, payload(i)) for i, p in enumerate(confirmed)]
