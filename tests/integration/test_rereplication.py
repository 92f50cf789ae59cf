"""Re-replication on real bookie processes (SQLite and ZooKeeper): a bookie killed with kill -9 for good,
its copies rebuilt with the ``ledger`` command, then a second bookie killed: nothing is lost."""
from __future__ import annotations

import json
import subprocess
import sys

from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.testing.bookies import child_env
from tests.integration.conftest import CONFIG, PASSWORD, payload, wait_until


def ledger_cli(metadata_uri: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyspark_ledger.cli.main", "--metadata", metadata_uri, "--json",
                           *args], capture_output=True, text=True, timeout=120, env=child_env(),
                          stdin=subprocess.DEVNULL)


def test_lost_bookie_rereplicated_by_the_cli_then_a_second_loss_loses_nothing(bookies, make_client, metadata_uri):
    client = make_client()
    with client.create_ledger(3, 2, 2, password=PASSWORD) as writer:
        futures = [writer.append_async(payload(index, 2048)) for index in range(300)]
        assert [future.result(60) for future in futures] == list(range(300))
        ledger_id = writer.ledger_id
    md = client.ledger_metadata(ledger_id)
    assert md.state == CLOSED and len(md.fragments) == 1
    by_id = {bookie.bookie_id: bookie for bookie in bookies.bookies}
    first, second, third = md.fragments[0].bookies
    by_id[first].kill()
    wait_until(lambda: first not in client.bookies(), what="the killed bookie's registration to expire")

    listed = ledger_cli(metadata_uri, "ledgers", "underreplicated")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [{"ledger_id": ledger_id, "state": CLOSED, "lost_bookies": [first],
                                          "sealed_slots": 1, "open_fragments": 0}]
    repaired = ledger_cli(metadata_uri, "ledgers", "rereplicate", "--all", "--password", PASSWORD.decode())
    assert repaired.returncode == 0, repaired.stderr
    [report] = json.loads(repaired.stdout)
    [moved] = report["replaced"]
    assert moved["lost"] == first and moved["replacement"] not in (first, second, third)
    assert moved["entries"] == report["entries_copied"] == 200  # slot 0 holds entries e % 3 in {0, 2}
    assert client.ledger_metadata(ledger_id).fragments[0].bookies == (moved["replacement"], second, third)
    assert json.loads(ledger_cli(metadata_uri, "ledgers", "underreplicated").stdout) == []

    # Entries e % 3 == 0 were on {first, second} only: without the repair, losing second loses them.
    by_id[second].kill()
    with LedgerClient(metadata_uri, CONFIG) as fresh:
        reader = fresh.open_ledger(ledger_id, PASSWORD, recovery=False)
        assert [entry.data for entry in reader.read(0, 299)] == [payload(i, 2048) for i in range(300)]


def test_autorecovery_process_rebuilds_the_copies_of_a_killed_bookie(bookies, make_client, metadata_uri):
    client = make_client()
    ledgers = []
    for _ in range(3):
        with client.create_ledger(3, 2, 2, password=PASSWORD) as writer:
            for index in range(60):
                writer.append_async(payload(index))
            ledgers.append(writer.ledger_id)
    named = lambda: {b for lid in ledgers for f in client.ledger_metadata(lid).fragments for b in f.bookies}  # noqa
    victim = sorted(named())[0]
    auto = subprocess.Popen([sys.executable, "-m", "pyspark_ledger.cli.main", "--metadata", metadata_uri,
                             "autorecovery", "--delay", "1", "--interval", "0.3", "--password", PASSWORD.decode()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                            stdin=subprocess.DEVNULL)
    try:
        {bookie.bookie_id: bookie for bookie in bookies.bookies}[victim].kill()
        wait_until(lambda: victim not in named(), timeout=90, what="auto-recovery to replace the killed bookie")
    finally:
        auto.terminate()
        out, err = auto.communicate(timeout=30)
    assert auto.returncode == 0, err
    assert f"{victim} -> " in out
    # every ledger that had a copy on the victim now has Qw copies again: a second loss loses nothing
    second = next(b for b in sorted(named()) if b != victim)
    {bookie.bookie_id: bookie for bookie in bookies.bookies}[second].kill()
    with LedgerClient(metadata_uri, CONFIG) as fresh:
        for ledger_id in ledgers:
            reader = fresh.open_ledger(ledger_id, PASSWORD, recovery=False)
            assert [entry.data for entry in reader.read(0, 59)] == [payload(i) for i in range(60)]


def test_autorecovery_closes_and_repairs_a_ledger_whose_writer_and_a_bookie_were_killed(bookies, make_client,
                                                                                       metadata_uri, tmp_path):
    """kill -9 a writer mid-stream and a bookie of its ensemble: the ledger stays OPEN on the lost bookie
    until auto-recovery fences and closes it and copies its entries; then a second loss loses nothing."""
    client = make_client()
    child = subprocess.Popen([sys.executable, "-m", "tests.integration.writer_child", metadata_uri],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                             env=child_env(), text=True)
    try:
        ledger_id = int(child.stdout.readline().split()[1])
        confirmed = -1
        while confirmed < 300:
            confirmed = int(child.stdout.readline().split()[1])
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    md = client.ledger_metadata(ledger_id)
    assert md.state == "OPEN"
    by_id = {bookie.bookie_id: bookie for bookie in bookies.bookies}
    first, second, _ = md.fragments[-1].bookies
    by_id[first].kill()
    wait_until(lambda: first not in client.bookies(), what="the killed bookie's registration to expire")
    assert ledger_cli(metadata_uri, "autorecovery", "--once", "--password", PASSWORD.decode()).returncode == 0
    assert client.ledger_metadata(ledger_id).state == "OPEN", "within the grace period it is left to its writer"

    done = ledger_cli(metadata_uri, "autorecovery", "--once", "--open-ledger-grace", "0", "--password",
                      PASSWORD.decode())
    assert done.returncode == 0, done.stderr
    assert ledger_id in json.loads(done.stdout)["recovered"]
    md = client.ledger_metadata(ledger_id)
    assert md.state == CLOSED and md.last_entry_id >= confirmed
    assert all(first not in fragment.bookies for fragment in md.fragments)

    by_id[second].kill()
    with LedgerClient(metadata_uri, CONFIG) as fresh:
        reader = fresh.open_ledger(ledger_id, PASSWORD, recovery=False)
        assert [entry.data for entry in reader.read(0, md.last_entry_id)] == \
            [payload(i) for i in range(md.last_entry_id + 1)]
