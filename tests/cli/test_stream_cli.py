"""`ledger streams list | show` against streams written through the log layer on a real sandbox."""
from __future__ import annotations

import json

import pyarrow as pa

from pyspark_ledger.log import StreamClient
from tests.cli.test_admin_cli import run_ledger


def test_streams_list_and_show(sandbox):
    with StreamClient(sandbox.metadata_uri) as streams:
        streams.create_stream("clicks", 2, pa.schema([("user", pa.int64()), ("url", pa.string())]),
                              write_quorum=2, ack_quorum=2)
        streams.create_stream("empty", 1)
        with streams.open_writer("clicks", 1) as writer:
            for i in range(7):
                writer.append(b"click %d" % i)
    listed = json.loads(run_ledger("--metadata", sandbox.metadata_uri, "--json", "streams", "list").stdout)
    assert [(row["stream"], row["partitions"], row["replication"]) for row in listed] == [
        ("clicks", 2, "E=3 Qw=2 Qa=2"), ("empty", 1, "E=3 Qw=3 Qa=2")]
    shown = json.loads(run_ledger("--metadata", sandbox.metadata_uri, "--json", "streams", "show", "clicks").stdout)
    assert shown["schema"] == "user: int64, url: string"
    assert [(l["partition"], l["ledger_seq"], l["entries"]) for l in shown["ledgers"]] == [(1, 0, 7)]
    table = run_ledger("--metadata", sandbox.metadata_uri, "streams", "show", "empty")
    assert "(none yet: set by the first write)" in table.stdout and "(none)" in table.stdout


def test_streams_show_missing_stream(sandbox):
    result = run_ledger("--metadata", sandbox.metadata_uri, "streams", "show", "no-such-stream")
    assert result.returncode == 1
    assert "stream 'no-such-stream' does not exist" in result.stderr and "Traceback" not in result.stderr


def test_streams_show_needs_the_streams_password(sandbox):
    with StreamClient(sandbox.metadata_uri, password=b"s3cret") as streams:
        streams.create_stream("guarded", 1)
        with streams.open_writer("guarded", 0) as writer:
            writer.append(b"one")
    refused = run_ledger("--metadata", sandbox.metadata_uri, "streams", "show", "guarded", "--password", "wrong-pw-7")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "--password (or $LEDGER_PASSWORD) does not match the password of stream 'guarded'" in refused.stderr
    assert "wrong-pw-7" not in refused.stderr and "s3cret" not in refused.stderr
    shown = run_ledger("--metadata", sandbox.metadata_uri, "--json", "streams", "show", "guarded",
                       env={"LEDGER_PASSWORD": "s3cret"})
    assert [(l["partition"], l["entries"]) for l in json.loads(shown.stdout)["ledgers"]] == [(0, 1)]
