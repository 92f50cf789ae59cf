"""`ledger ledgers delete` on a stream's ledger, `ledger streams delete` and `ledger streams repair`, as a user runs
them: subprocesses against a real sandbox (tests/cli/conftest.py)."""
from __future__ import annotations

import json

from pyspark_ledger.log import StreamClient
from tests.cli.conftest import ledger
from tests.stream_ledgers import exists

PASSWORD = "cli-streams"



def stream_of_ledgers(streams, name, count):
    streams.create_stream(name, 1)
    ids = []
    for batch in range(count):
        writer = streams.create_ledger(name, 0)
        writer.append(b"entry %d" % batch)
        writer.close()
        streams.commit_ledgers(name, "job", batch, {0: [writer.ledger_id]})
        ids.append(writer.ledger_id)
    return ids


def test_deleting_a_streams_ledger_is_refused_naming_what_it_breaks_unless_forced(sandbox):
    with StreamClient(sandbox.metadata_uri, password=PASSWORD) as streams:
        ids = stream_of_ledgers(streams, "cli-refuse", 2)
        refused = ledger(sandbox, "ledgers", "delete", str(ids[1]), "--password", PASSWORD)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        for words in (f"ledger {ids[1]} is part of stream 'cli-refuse' partition 0", "positions 1:0 up to 2:0",
                      "Not deleted", "--force"):
            assert words in refused.stderr
        assert exists(streams, ids[1])  # nothing deleted

        forced = ledger(sandbox, "--json", "ledgers", "delete", str(ids[1]), "--password", PASSWORD, "--force")
        assert forced.returncode == 0, forced.stderr
        assert json.loads(forced.stdout) == {"deleted": ids[1], "broke": [
            {"stream": "cli-refuse", "partition": 0, "ledger_seq": 1, "from": "1:0", "to": "2:0"}]}
        assert not exists(streams, ids[1])

        forced_text = ledger(sandbox, "ledgers", "delete", str(ids[0]), "--password", PASSWORD, "--force")
        assert forced_text.returncode == 0, forced_text.stderr
        assert f"deleted ledger {ids[0]}" in forced_text.stdout
        assert "warning: this lost stream 'cli-refuse' partition 0: positions 0:0 up to 1:0" in forced_text.stdout


def test_a_ledger_of_no_stream_is_deleted_as_before(sandbox, client):
    writer = client.create_ledger(3, 3, 2, password=b"alone")
    writer.close()
    result = ledger(sandbox, "ledgers", "delete", str(writer.ledger_id), "--password", "alone")
    assert result.returncode == 0 and f"deleted ledger {writer.ledger_id}" in result.stdout
    assert "warning" not in result.stdout


def test_streams_repair_drops_lost_head_ledgers_and_dry_runs(sandbox):
    with StreamClient(sandbox.metadata_uri, password=PASSWORD) as streams:
        ids = stream_of_ledgers(streams, "cli-repair", 3)
        streams.client.delete_ledger(ids[0], PASSWORD.encode())
        streams.client.delete_ledger(ids[2], PASSWORD.encode())
        dry = ledger(sandbox, "streams", "repair", "cli-repair", "--password", PASSWORD, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "would drop 1 of 2 lost ledger(s)" in dry.stdout and "0:0 up to 1:0" in dry.stdout
        assert "kept (intact ledgers follow" in dry.stdout
        assert streams.partition_logs("cli-repair")[0].spans[0].ledger_id == ids[0]

        wrong = ledger(sandbox, "streams", "repair", "cli-repair", "--password", "nope")
        assert wrong.returncode == 1 and "does not match the password of stream 'cli-repair'" in wrong.stderr

        done = ledger(sandbox, "--json", "streams", "repair", "cli-repair", "--password", PASSWORD)
        doc = json.loads(done.stdout)
        assert [(row["ledger_id"], row["range"], row["action"][:7]) for row in doc["lost"]] == [
            (ids[0], "0:0 up to 1:0", "dropped"), (ids[2], "2:0 up to 3:0", "kept (i")]
        assert [span.ledger_id for span in streams.partition_logs("cli-repair")[0].spans] == [ids[1], ids[2]]
        again = ledger(sandbox, "streams", "repair", "cli-repair", "--password", PASSWORD, "--dry-run")
        assert "would drop 0 of 1 lost ledger(s)" in again.stdout


def test_streams_delete_needs_the_password_then_deletes_record_and_ledgers(sandbox):
    with StreamClient(sandbox.metadata_uri, password=PASSWORD) as streams:
        ids = stream_of_ledgers(streams, "cli-delete", 2)
        wrong = ledger(sandbox, "streams", "delete", "cli-delete", "--password", "nope")
        assert wrong.returncode == 1 and "does not match the password of stream 'cli-delete'" in wrong.stderr
        assert "cli-delete" in streams.list_streams() and all(exists(streams, i) for i in ids)

        done = ledger(sandbox, "streams", "delete", "cli-delete", "--password", PASSWORD)
        assert done.returncode == 0, done.stderr
        assert "deleted stream 'cli-delete' and its ledgers" in done.stdout
        assert "cli-delete" not in streams.list_streams() and not any(exists(streams, i) for i in ids)
        missing = ledger(sandbox, "streams", "delete", "cli-delete", "--password", PASSWORD)
        assert missing.returncode == 1 and "stream 'cli-delete' does not exist" in missing.stderr
