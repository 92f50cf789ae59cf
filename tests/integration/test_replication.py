"""The replication client against real bookie processes, with SQLite and with ZooKeeper metadata.

Kill -9 of a bookie mid-stream (ensemble change), recovery of a writer
process killed with kill -9, fencing (also across a bookie restart, docs/protocol.md F5),
tailing readers, and thread hygiene.
"""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from pyspark_ledger.client.bookie_rpc import BookieClient
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import LedgerFencedError
from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.testing.bookies import _REPO_ROOT, child_env
from tests.integration.conftest import PASSWORD, payload, wait_until


def read_back(client, ledger_id: int) -> list[bytes]:
    reader = client.open_ledger(ledger_id, PASSWORD)
    return [entry.data for entry in reader.read()]


def test_kill_bookie_mid_stream_changes_ensemble_and_keeps_every_confirmed_entry(bookies, make_client):
    client = make_client()
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    by_address = {bookie.bookie_id: bookie for bookie in bookies.bookies}
    victim = by_address[writer.metadata.current_fragment.bookies[0]]
    total = 3000
    futures = []
    for index in range(total):
        futures.append(writer.append_async(payload(index)))
        if index == total // 3:
            futures[total // 6].result(30)  # some entries are confirmed, many are in flight
            victim.kill()
    outcomes = [future.result(60) for future in futures]
    assert outcomes == list(range(total))
    fragments = writer.metadata.fragments
    assert len(fragments) >= 2 and victim.bookie_id not in fragments[-1].bookies
    writer.close()
    md = client.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id) == (CLOSED, total - 1)
    other = make_client()
    assert read_back(other, writer.ledger_id) == [payload(i) for i in range(total)]


def test_recovery_of_a_writer_process_killed_with_sigkill(bookies, make_client, metadata_uri, tmp_path):
    stderr_path = tmp_path / "writer-child.stderr"
    with open(stderr_path, "wb") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "tests.integration.writer_child", metadata_uri],
                                 stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                 env=child_env(), cwd=str(_REPO_ROOT), text=True)
    confirmed = []
    try:
        first = child.stdout.readline().split()
        assert first[:1] == ["ledger"], f"writer child failed: {first} {stderr_path.read_text()[-2000:]}"
        ledger_id = int(first[1])
        for line in child.stdout:
            confirmed.append(int(line.split()[1]))
            if len(confirmed) >= 1500:
                break
    finally:
        child.kill()
        child.wait()
    rest = child.stdout.read()  # the same buffered reader: lines it already read ahead are kept
    child.stdout.close()
    complete = rest.split("\n")[:-1]  # the last line may have been cut by the kill
    confirmed += [int(line.split()[1]) for line in complete if line.startswith("confirmed")]
    out_of_order = [(i, e) for i, e in enumerate(confirmed) if i != e][:5]
    assert not out_of_order, f"confirmations out of order: {out_of_order}"

    client = make_client()
    assert client.ledger_metadata(ledger_id).state == "OPEN"
    reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
    md = client.ledger_metadata(ledger_id)
    assert md.state == CLOSED and md.last_entry_id >= confirmed[-1]
    data = [entry.data for entry in reader.read()]
    assert data == [payload(i) for i in range(md.last_entry_id + 1)]
    assert read_back(make_client(), ledger_id) == data  # a second recoverer agrees


def test_F5_fenced_writer_is_refused_even_after_bookie_restarts(bookies, make_client):
    writer_client = make_client()
    writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
    for index in range(20):
        writer.append(payload(index))
    reader = make_client().open_ledger(writer.ledger_id, PASSWORD, recovery=True)
    assert reader.is_closed and reader.last_add_confirmed == 19
    with pytest.raises(LedgerFencedError):
        writer.append(payload(20))
    by_id = {bookie.bookie_id: bookie for bookie in bookies.bookies}
    ensemble = writer.metadata.current_fragment.bookies
    for bookie_id in ensemble:
        by_id[bookie_id].restart()  # F5: the fence must survive a restart
    body = EntryCodec("crc32c", PASSWORD).encode(writer.ledger_id, 20, 19, 0, payload(20))
    for bookie_id in ensemble:
        with BookieClient(bookie_id) as bookie:
            with bookie.add_stream() as stream:
                result = stream.add(writer.ledger_id, 20, master_key(PASSWORD), body).result(30)
        assert result.status.name == "FENCED", f"bookie {bookie_id} accepted an add after its restart"
    assert read_back(make_client(), writer.ledger_id) == [payload(i) for i in range(20)]


@pytest.mark.bookies(3)
def test_tailing_reader_long_polls_for_new_entries(bookies, make_client):
    writer = make_client().create_ledger(3, 3, 2, password=PASSWORD)
    tail = make_client().open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    assert tail.last_add_confirmed == -1 and not tail.is_closed
    stop = threading.Event()

    def write() -> None:
        index = 0
        while not stop.is_set() and index < 400:
            writer.append(payload(index))
            index += 1
    thread = threading.Thread(target=write)
    thread.start()
    try:
        seen = []
        while len(seen) < 100:
            assert tail.wait_for_entry(len(seen), timeout=30)
            seen += [entry.data for entry in tail.read(len(seen), tail.last_add_confirmed)]
        assert seen == [payload(i) for i in range(len(seen))]
    finally:
        stop.set()
        thread.join(60)
    writer.close()
    last = writer.last_add_confirmed
    assert tail.wait_for_entry(last, timeout=30) and tail.is_closed
    assert [entry.data for entry in tail.read()] == [payload(i) for i in range(last + 1)]


@pytest.mark.bookies(3)
def test_client_close_returns_thread_count_to_baseline(bookies, metadata_uri):
    from pyspark_ledger.client.ledger_client import LedgerClient
    from tests.integration.conftest import CONFIG
    baseline = {thread.ident for thread in threading.enumerate()}
    client = LedgerClient(metadata_uri, CONFIG)
    wait_until(lambda: len(client.bookies()) == 3, what="bookies to register")
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    for future in [writer.append_async(payload(i)) for i in range(200)]:
        future.result(30)
    writer.close()
    assert len(read_back(client, writer.ledger_id)) == 200
    client.close()
    wait_until(lambda: not [t for t in threading.enumerate() if t.ident not in baseline],
               timeout=10, what="the client's threads to end")


@pytest.mark.bookies(1)
def test_bookies_with_explicit_ids_are_reached_through_their_registration(bookies, tmp_path, metadata_uri):
    from pyspark_ledger.client.ledger_client import LedgerClient
    from pyspark_ledger.testing.bookies import BookieProcess
    from tests.integration.conftest import CONFIG
    named = [BookieProcess(tmp_path / f"named-{i}", metadata_uri, bookie_id=f"named-bookie-{i}") for i in range(3)]
    try:
        for bookie in named:
            bookie.start()
        with LedgerClient(metadata_uri, CONFIG) as client:
            ids = wait_until(lambda: {b for b in client.bookies() if b.startswith("named-")} == {
                f"named-bookie-{i}" for i in range(3)} and client.bookies(), what="named bookies to register")
            writer = client.create_ledger(4, 3, 2, password=PASSWORD)
            assert any(b.startswith("named-") for b in writer.metadata.current_fragment.bookies), ids
            for index in range(30):
                writer.append(payload(index))
            writer.close()
            assert read_back(client, writer.ledger_id) == [payload(i) for i in range(30)]
    finally:
        for bookie in named:
            bookie.kill()
