"""The admin commands of `ledger`, run as a user would: a subprocess against a real SQLite store."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pyspark_ledger.entry import password_check
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.model import CLOSED, Fragment, LedgerMetadata

ENSEMBLE = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")


def run_ledger(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "LEDGER_METADATA"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "pyspark_ledger.cli.main", *args], capture_output=True,
                          text=True, env=full_env, timeout=60)


@pytest.fixture()
def store_uri(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db"
    with open_metadata_store(uri, create=True) as store:
        first = store.new_ledger_id()
        store.create_ledger(LedgerMetadata(first, 3, 3, 2, (Fragment(0, ENSEMBLE),), ctime_ms=1_700_000_000_000,
                                           custom_metadata={"app": b"demo"}, password_check=password_check(b"pw")))
        second = store.new_ledger_id()
        store.create_ledger(LedgerMetadata(
            second, 3, 2, 2, (Fragment(0, ENSEMBLE), Fragment(12, ("127.0.0.1:3184",) + ENSEMBLE[1:])),
            state=CLOSED, last_entry_id=20, length=4096, ctime_ms=1_700_000_000_000))
    return uri


def test_ledgers_list_as_table_and_json(store_uri):
    table = run_ledger("--metadata", store_uri, "ledgers", "list")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["LEDGER_ID", "STATE", "ENSEMBLE"]
    assert [line.split()[1] for line in lines[1:]] == ["OPEN", "CLOSED"]
    rows = json.loads(run_ledger("--metadata", store_uri, "--json", "ledgers", "list").stdout)
    assert [(r["state"], r["last_entry_id"], r["length"]) for r in rows] == [("OPEN", "", ""), ("CLOSED", 20, 4096)]


def test_ledgers_show_lists_fragments(store_uri):
    doc = json.loads(run_ledger("--metadata", store_uri, "--json", "ledgers", "show", "1").stdout)
    assert doc["fragments"] == [
        {"first_entry_id": 0, "bookies": list(ENSEMBLE)},
        {"first_entry_id": 12, "bookies": ["127.0.0.1:3184", *ENSEMBLE[1:]]},
    ]
    assert (doc["write_quorum"], doc["ack_quorum"], doc["state"]) == (2, 2, "CLOSED")
    table = run_ledger("--metadata", store_uri, "ledgers", "show", "0")
    assert "custom_metadata  {'app': 'demo'}" in table.stdout
    assert "127.0.0.1:3181, 127.0.0.1:3182, 127.0.0.1:3183" in table.stdout


def test_ledgers_delete_needs_the_password_then_missing(store_uri):
    for refused in (run_ledger("--metadata", store_uri, "ledgers", "delete", "0"),
                    run_ledger("--metadata", store_uri, "ledgers", "delete", "0", "--password", "nope")):
        assert refused.returncode == 1
        assert "give the ledger's password or use the cluster's repair key" in refused.stderr
    assert run_ledger("--metadata", store_uri, "ledgers", "show", "0").returncode == 0, "still there"
    deleted = run_ledger("--metadata", store_uri, "ledgers", "delete", "0", "--password", "pw")
    assert deleted.returncode == 0 and "deleted ledger 0" in deleted.stdout
    missing = run_ledger("--metadata", store_uri, "ledgers", "show", "0")
    assert missing.returncode == 1
    assert "ledger 0 does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_metadata_from_environment(store_uri):
    listed = run_ledger("--json", "ledgers", "list", env={"LEDGER_METADATA": store_uri})
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 2


DEFAULT_PLACE = {"zone": "default-zone", "rack": "default-rack"}
NO_SPACE = {"journal_free_bytes": None, "journal_total_bytes": None, "ledgers_free_bytes": None,
            "ledgers_total_bytes": None}


def test_bookies_lists_registrations(store_uri):
    """Registrations of bookies older than the disk-space field list with the space unknown (null in JSON)."""
    with open_metadata_store(store_uri) as store:
        registration = store.register_bookie("127.0.0.1:3181", {"metrics_url": "http://127.0.0.1:9000/metrics"})
        store.register_bookie("127.0.0.1:3182", {}, read_only=True)
        rows = json.loads(run_ledger("--metadata", store_uri, "--json", "bookies").stdout)
        table = run_ledger("--metadata", store_uri, "bookies").stdout.splitlines()
        registration.close()
    assert rows == [
        {"bookie_id": "127.0.0.1:3181", "mode": "writable", **DEFAULT_PLACE, "tls": "",
         "metrics": "http://127.0.0.1:9000/metrics", **NO_SPACE},
        {"bookie_id": "127.0.0.1:3182", "mode": "read-only", **DEFAULT_PLACE, "tls": "", "metrics": "", **NO_SPACE},
    ]
    assert table[0].split() == ["BOOKIE_ID", "MODE", "ZONE", "RACK", "TLS", "JOURNAL", "LEDGERS", "METRICS"]
    assert [line.split()[4:6] for line in table[1:]] == [["unknown", "unknown"], ["unknown", "unknown"]]


HOSTILE_PLACES = [None, 7, "", "a b", "x" * 65, "zone/1", ["eu"], {"zone": "eu"}, "é"]


def test_bookies_show_zone_and_rack_and_read_nonsense_as_the_default(store_uri):
    """A declared zone and rack are listed; a registration's zone or rack that is not a valid name (1-64
    letters, digits, '.', '_', '-') lists as the default, like a registration from before the field."""
    with open_metadata_store(store_uri) as store:
        registrations = [store.register_bookie("127.0.0.1:3100", {"zone": "eu-west-1a", "rack": "r.7_x"})]
        registrations += [store.register_bookie(f"127.0.0.1:{3101 + i}", {"zone": value, "rack": value})
                          for i, value in enumerate(HOSTILE_PLACES)]
        rows = json.loads(run_ledger("--metadata", store_uri, "--json", "bookies").stdout)
        table = run_ledger("--metadata", store_uri, "bookies").stdout.splitlines()
        for registration in registrations:
            registration.close()
    assert (rows[0]["zone"], rows[0]["rack"]) == ("eu-west-1a", "r.7_x")
    assert [(row["zone"], row["rack"]) for row in rows[1:]] == [("default-zone", "default-rack")] * len(HOSTILE_PLACES)
    assert table[1].split()[2:4] == ["eu-west-1a", "r.7_x"]


HUGE = 2**63
HOSTILE_DISK = [
    "full", ["journal"], {"journal": "lots"}, {"journal": {"free_bytes": -1, "total_bytes": 10}},
    {"journal": {"free_bytes": 11, "total_bytes": 10}}, {"journal": {"free_bytes": True, "total_bytes": 10}},
    {"journal": {"free_bytes": 1.5, "total_bytes": 10}}, {"journal": {"free_bytes": "1", "total_bytes": "10"}},
    {"journal": {"free_bytes": 1, "total_bytes": HUGE}}, {"journal": {"free_bytes": 10**400, "total_bytes": 10}},
    {"journal": {"free_bytes": None}}, {"journal": {"total_bytes": 10}},
]


@pytest.mark.parametrize("disk", HOSTILE_DISK, ids=range(len(HOSTILE_DISK)))
def test_bookies_calls_a_nonsense_disk_field_unknown(store_uri, disk):
    """A registration is data from the network: disk figures that are not byte counts (0..2**63-1, free <=
    total) list as unknown, the other area and the other columns as usual."""
    good = {"free_bytes": 4096, "total_bytes": 8192}
    info = {"tls": "", "disk": disk if not isinstance(disk, dict) else {**disk, "ledgers": good}}
    with open_metadata_store(store_uri) as store:
        registration = store.register_bookie("127.0.0.1:3181", info)
        listed = run_ledger("--metadata", store_uri, "--json", "bookies")
        table = run_ledger("--metadata", store_uri, "bookies")
        registration.close()
    assert listed.returncode == 0 and table.returncode == 0, listed.stderr + table.stderr
    row = json.loads(listed.stdout)[0]
    assert (row["journal_free_bytes"], row["journal_total_bytes"], row["tls"]) == (None, None, "plaintext")
    expected_ledgers = (4096, 8192) if isinstance(disk, dict) else (None, None)
    assert (row["ledgers_free_bytes"], row["ledgers_total_bytes"]) == expected_ledgers
    line = table.stdout.splitlines()[1]
    assert "unknown" in line and ("4.0 KiB free of 8.0 KiB" in line) == isinstance(disk, dict), line


@pytest.mark.parametrize("args,code,message", [
    (("ledgers", "list"), 2, "no metadata store given"),
    (("--metadata", "mysql://x/y", "ledgers", "list"), 2, "mysql://x/y"),
    (("--metadata", "sqlite:////nonexistent/dir/m.db", "bookies"), 1, "no metadata store at /nonexistent/dir/m.db"),
    (("--metadata", "sqlite:////tmp/x.db", "ledgers", "show", "abc"), 2, "invalid int value"),
    ((), 2, "usage: ledger"),
])
def test_bad_input_gives_a_clear_error(args, code, message):
    result = run_ledger(*args)
    assert result.returncode == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [("bookies",), ("ledgers", "list"), ("ledgers", "show", "0"),
                                     ("ledgers", "read", "0"), ("streams", "list"),
                                     ("streams", "show", "events")])
def test_read_only_commands_on_a_missing_store_name_the_path_and_create_nothing(tmp_path, command):
    path = tmp_path / "typo" / "metadata.db"
    result = run_ledger("--metadata", f"sqlite://{path}", *command)
    assert result.returncode == 1, result.stderr
    assert f"no metadata store at {path}" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == [], "the read created files"
