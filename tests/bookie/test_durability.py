"""Bookie durability with real processes: kill -9, crash points, fences across restarts, corruption.

docs/protocol.md B1, B2, B4 and F5.
"""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client import BookieClient, BookieStatus
from pyspark_ledger.errors import BookieProcessError, BookieUnavailableError

from .conftest import KEY, entry, wait_until

PRODUCERS = 3


class Producer(threading.Thread):
    """Adds entries of one ledger on its own stream until stopped or the stream breaks; records acks."""

    def __init__(self, client: BookieClient, ledger_id: int) -> None:
        super().__init__(name=f"producer-{ledger_id}")
        self.stream = client.add_stream(max_inflight=256)
        self.ledger_id = ledger_id
        self.acked: dict[int, bytes] = {}
        self.failures: list[BaseException] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        for entry_id in range(1_000_000):
            if self.stop_event.is_set():
                return
            body = entry(self.ledger_id, entry_id)
            future = self.stream.add(self.ledger_id, entry_id, KEY, body)
            future.add_done_callback(lambda done, e=entry_id, b=body: self._record(done, e, b))
            if future.done() and future.exception() is not None:
                return

    def _record(self, future, entry_id: int, body: bytes) -> None:
        if future.exception() is not None:
            self.failures.append(future.exception())
        elif future.result().ok:
            self.acked[entry_id] = body


def assert_entries_read_back(client: BookieClient, ledger_id: int, expected: dict[int, bytes]) -> None:
    """Every expected entry reads back with its exact bytes."""
    found: dict[int, bytes] = {}
    next_id, last = 0, max(expected)
    while next_id <= last:
        reply = client.read(ledger_id, next_id, last, master_key=KEY)
        assert reply.status == BookieStatus.OK, (ledger_id, next_id, reply.status, reply.message)
        found.update(reply.entries)
        next_id = reply.entries[-1][0] + 1
    for entry_id, body in expected.items():
        assert found.get(entry_id) == body, f"ledger {ledger_id} entry {entry_id} lost or changed"


def test_kill9_during_concurrent_adds_keeps_every_acknowledged_entry(make_bookie):
    """B1: several streams adding, kill -9, restart on the same port and dir, read everything back."""
    bookie = make_bookie(checkpoint_interval=0.5).start()
    producers = [Producer(BookieClient(bookie.bookie_id), 200 + n) for n in range(PRODUCERS)]
    try:
        for producer in producers:
            producer.start()
        wait_until(lambda: all(len(p.acked) >= 300 for p in producers), 60, "acknowledged adds on every stream")
        bookie.kill()
        for producer in producers:
            producer.stop_event.set()
            producer.join(60)
            assert not producer.is_alive()
        assert any(isinstance(exc, BookieUnavailableError) for p in producers for exc in p.failures)
        bookie.start()
        with BookieClient(bookie.bookie_id) as reader:
            for producer in producers:
                assert_entries_read_back(reader, producer.ledger_id, dict(producer.acked))
    finally:
        for producer in producers:
            producer.stop_event.set()
            producer.stream.close()


@pytest.mark.parametrize("crash_point", ["checkpoint_after_mark_taken", "checkpoint_before_mark_persist"])
def test_crash_inside_a_checkpoint_restores_every_acknowledged_entry(make_bookie, client_for, crash_point):
    """B2: the process dies between taking the checkpoint mark and the index flush (or the mark write)."""
    bookie = make_bookie(checkpoint_interval=0).start(env={"BOOKIE_CRASH_POINT": crash_point})
    client = client_for(bookie)
    with client.add_stream() as stream:
        futures = {e: stream.add(300, e, KEY, entry(300, e)) for e in range(500)}
        assert all(future.result(30).ok for future in futures.values())
    assert bookie.stop() == 137, "the SIGTERM checkpoint should have hit the crash point"
    bookie.start()
    reader = client_for(bookie)
    assert_entries_read_back(reader, 300, {e: entry(300, e) for e in range(500)})
    assert reader.read_lac(300, master_key=KEY).last_add_confirmed == 498


def test_fence_survives_a_kill9_restart(make_bookie, client_for):
    """F5: once a fence was acknowledged, the restarted bookie still refuses normal adds."""
    bookie = make_bookie(checkpoint_interval=0).start()
    client = client_for(bookie)
    with client.add_stream() as stream:
        assert stream.add(400, 0, KEY, entry(400, 0)).result(30).ok
    fenced = client.read(400, 0, fence=True, master_key=KEY)
    assert fenced.status == BookieStatus.OK and fenced.fenced
    bookie.kill()
    bookie.start()
    after = client_for(bookie)
    lac = after.read_lac(400, master_key=KEY)
    assert lac.fenced is True and lac.last_entry_id == 0
    with after.add_stream() as stream:
        assert stream.add(400, 1, KEY, entry(400, 1)).result(30).status == BookieStatus.FENCED
        assert stream.add(400, 1, KEY, entry(400, 1), True).result(30).ok


def test_corrupt_entry_log_bytes_read_as_io_error_never_no_such_entry(make_bookie, client_for):
    """B4: flip bytes of one stored entry in the entry log of a stopped bookie."""
    bookie = make_bookie(checkpoint_interval=0).start()
    client = client_for(bookie)
    victim = entry(500, 1, b"the entry that will be damaged " * 8)
    with client.add_stream() as stream:
        for e, body in enumerate([entry(500, 0), victim, entry(500, 2)]):
            assert stream.add(500, e, KEY, body).result(30).ok
    assert bookie.stop() == 0
    logs = sorted((bookie.data_dir / "entry_logs").glob("*.log"))
    damaged = 0
    for path in logs:
        data = bytearray(path.read_bytes())
        at = data.find(victim)
        if at >= 0:
            data[at + len(victim) - 10] ^= 0xFF
            path.write_bytes(bytes(data))
            damaged += 1
    assert damaged == 1, f"victim entry not found exactly once in {logs}"
    bookie.start()
    reader = client_for(bookie)
    reply = reader.read(500, 1, master_key=KEY)
    assert reply.status == BookieStatus.IO_ERROR, reply
    assert "ledger 500 entry 1" in reply.message
    whole = reader.read(500, 0, 2, master_key=KEY)  # a range stops before the unreadable entry, still OK for entry 0
    assert whole.status == BookieStatus.OK and [e for e, _ in whole.entries] == [0]
    assert reader.read(500, 2, master_key=KEY).entries == ((2, entry(500, 2)),)


def test_journal_garbage_in_the_middle_stops_startup_unless_skipped(make_bookie, client_for):
    """B1: corruption before the journal's tail is not silently ignored."""
    bookie = make_bookie(checkpoint_interval=0).start()
    with client_for(bookie).add_stream() as stream:
        for e in range(60):  # one at a time: many journal records
            assert stream.add(800, e, KEY, entry(800, e)).result(30).ok
    bookie.kill()  # no checkpoint: every record is still in the journal
    (journal,) = sorted((bookie.data_dir / "journal").iterdir())
    data = bytearray(journal.read_bytes())
    data[len(data.rstrip(b"\0")) // 3] ^= 0xFF  # within the records (preallocated zeros follow them)
    journal.write_bytes(bytes(data))
    with pytest.raises(BookieProcessError, match="exited with status 1"):
        bookie.start()
    stderr = (bookie.data_dir / "bookie-stderr.log").read_text()
    failure = [line for line in stderr.splitlines() if line.startswith("bookie-server:")]
    assert len(failure) == 1 and "Traceback" not in stderr
    assert "journal" in failure[0] and "--skip-journal-corruption" in failure[0]
    bookie.flags["skip_journal_corruption"] = True
    bookie.start()
    reply = client_for(bookie).read(800, 0, 59, master_key=KEY)
    assert reply.status == BookieStatus.OK and reply.entries[0] == (0, entry(800, 0))
