"""`ledger streams gc` as a user runs it: a subprocess against a real sandbox, orphans made through the log layer."""
from __future__ import annotations

import json

from pyspark_ledger.log import StreamClient
from tests.cli.test_admin_cli import run_ledger
from tests.stream_ledgers import closed_ledger, exists




def gc(sandbox, *args):
    return run_ledger("--metadata", sandbox.metadata_uri, "streams", "gc", *args)


def test_gc_keeps_young_orphans_dry_runs_then_deletes(sandbox):
    with StreamClient(sandbox.metadata_uri) as streams:
        streams.create_stream("gc-orders", 1)
        committed = closed_ledger(streams, "gc-orders", 0, b"committed")
        streams.commit_ledgers("gc-orders", "job-1", 0, {0: [committed]})
        orphan = closed_ledger(streams, "gc-orders", 0, b"orphan")

        young = gc(sandbox, "gc-orders", "--json")  # default minimum age: one hour
        assert young.returncode == 0, young.stderr
        doc = json.loads(young.stdout)
        assert (doc["orphans"], doc["deleted"], doc["young"], doc["min_age_s"]) == ([], [], [orphan], 3600.0)

        dry = gc(sandbox, "gc-orders", "--min-age", "0", "--dry-run", "--json")
        doc = json.loads(dry.stdout)
        assert [(row["ledger_id"], row["state"], row["entries"], row["action"]) for row in doc["orphans"]] == [
            (orphan, "CLOSED", 1, "would delete")]
        assert doc["deleted"] == [] and doc["dry_run"] is True and exists(streams, orphan)

        table = gc(sandbox, "gc-orders", "--min-age", "0")
        assert table.returncode == 0, table.stderr
        assert f"{orphan}" in table.stdout and "deleted 1 orphan ledger(s)" in table.stdout
        assert not exists(streams, orphan) and exists(streams, committed)
        assert [e.data for e in streams.open_reader("gc-orders", 0).entries()] == [b"committed"]

        again = run_ledger("--metadata", sandbox.metadata_uri, "--json", "streams", "gc", "gc-orders", "--min-age", "0")
        assert json.loads(again.stdout)["orphans"] == []  # the global --json works too


def test_gc_bad_input_is_refused_clearly(sandbox):
    negative = gc(sandbox, "gc-missing", "--min-age", "-5")
    assert negative.returncode == 2 and "min_age_s must be" in negative.stderr
    missing = gc(sandbox, "gc-missing", "--min-age", "0")
    assert missing.returncode == 1 and "stream 'gc-missing' does not exist" in missing.stderr
    not_a_number = gc(sandbox, "gc-missing", "--min-age", "soon")
    assert not_a_number.returncode == 2 and "--min-age" in not_a_number.stderr
    for result in (negative, missing, not_a_number):
        assert "Traceback" not in result.stderr
