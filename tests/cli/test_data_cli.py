"""`ledger simpletest`, `ledger ledgers read` and `ledger recover` against a real 3-bookie sandbox."""
from __future__ import annotations

import json

import pytest

from pyspark_ledger.errors import LedgerFencedError
from tests.cli.conftest import ledger


def test_simpletest_writes_reads_and_verifies(sandbox, client):
    before = set(client.list_ledgers())
    result = ledger(sandbox, "--json", "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "300", "-s", "100")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["entries"], report["verified"], report["ensemble"]) == (300, True, "E=3 Qw=2 Qa=2")
    assert set(client.list_ledgers()) == before, "the test ledger is deleted unless --keep"
    kept = json.loads(ledger(sandbox, "--json", "simpletest", "-n", "5", "--keep").stdout)
    md = client.ledger_metadata(kept["ledger_id"])
    assert (md.state, md.last_entry_id, md.length) == ("CLOSED", 4, 5 * 1024)


@pytest.mark.parametrize("args,code,message", [
    (("-e", "3", "-w", "4", "-a", "2"), 2, "ensemble_size >= write_quorum >= ack_quorum"),
    (("-e", "5", "-w", "3", "-a", "2"), 1, "bookies"),
    (("-n", "0"), 2, "-n >= 1"),
])
def test_simpletest_bad_input(sandbox, args, code, message):
    result = ledger(sandbox, "simpletest", *args)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_read_prints_entries_in_range(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        for i in range(10):
            writer.append(f"event-{i}".encode())
    table = ledger(sandbox, "ledgers", "read", str(writer.ledger_id), "--password", "pw", "--from", "3", "--to", "5")
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[1:]]
    assert rows == [["3", "7", "event-3"], ["4", "7", "event-4"], ["5", "7", "event-5"]]
    whole = json.loads(ledger(sandbox, "--json", "ledgers", "read", str(writer.ledger_id), "--password", "pw").stdout)
    assert [row["entry_id"] for row in whole] == list(range(10))


def test_read_refuses_wrong_password_and_bad_range(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        writer.append(b"x")
    wrong = ledger(sandbox, "ledgers", "read", str(writer.ledger_id), "--password", "nope")
    assert wrong.returncode == 1 and "password" in wrong.stderr
    bad = ledger(sandbox, "ledgers", "read", str(writer.ledger_id), "--password", "pw", "--from", "5", "--to", "2")
    assert bad.returncode == 2 and "--from 5 --to 2" in bad.stderr


def test_recover_closes_a_ledger_whose_writer_stopped(sandbox, client):
    writer = client.create_ledger(3, 3, 2, password=b"pw")
    for i in range(25):
        writer.append(b"entry %d" % i)
    # The writer never closes: to the cluster it looks dead.
    result = ledger(sandbox, "--json", "recover", str(writer.ledger_id), "--password", "pw")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["state"], report["last_entry_id"]) == ("CLOSED", 24)
    with pytest.raises(LedgerFencedError):
        writer.append(b"after recovery")
