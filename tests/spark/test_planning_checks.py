"""Mistakes a Spark job can be told about on the driver, at planning: once, before any task runs.

- a read pointed at a missing ``sqlite:///`` path names the path and creates
  no file or directory (reads never create a metadata store);
- a write asking for more bookies than are live and writable (ensembleSize=9
  on a three-bookie sandbox) fails with one NotEnoughBookiesError naming E and
  how many are live, no task runs and no ledger is created;
- a write with quorums breaking E >= Qw >= Qa fails the same way;
- so does a write to an existing stream whose own replication is too wide for
  the live bookies, or whose record holds broken quorums.
"""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.log.log_metadata import Replication  # noqa: E402
from pyspark_ledger.log.stream_store import update_stream  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402

pytestmark = pytest.mark.spark
PASSWORD = "planning-checks"
#: How Spark reports an error of the data source's code on the driver (never a task failure).
DRIVER_ERRORS = ("PYTHON_DATA_SOURCE_ERROR", "PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR")


def ledger_count(cluster) -> int:
    return len(executor.ledger_client(cluster.metadata_uri).list_ledgers())


def fails_on_the_driver(action, error: str, expected: str) -> str:
    """Run ``action``: it must fail once with ``error: expected...`` from the driver."""
    with pytest.raises(Exception) as caught:
        action()
    text = str(caught.value)
    assert f"{error}: {expected}" in text, f"not the one expected error ({expected!r}): {text[:1500]}"
    assert text.count(f"{error}:") == 1, f"one message, not a chain of them: {text[:1500]}"
    assert "Task" not in text.split("Traceback")[0] and "Job aborted" not in text, f"a task ran: {text[:1500]}"
    assert any(marker in text for marker in DRIVER_ERRORS), text[:1500]
    return text


def test_a_read_of_a_missing_sqlite_store_names_the_path_and_creates_nothing(spark, tmp_path):
    path = tmp_path / "no-such-dir" / "metadata.db"
    reader = spark.read.format("ledger").options(metadataServiceUri=f"sqlite://{path}", password=PASSWORD)
    fails_on_the_driver(lambda: reader.load("events").collect(), "NoSuchMetadataStoreError",
                        f"no metadata store at {path}")
    assert list(tmp_path.iterdir()) == [], "the read created files or directories"


@pytest.mark.parametrize("replication,error,expected", [
    ({"ensembleSize": "9", "writeQuorum": "2", "ackQuorum": "2"}, "NotEnoughBookiesError",
     "option ensembleSize=9 asks for 9 bookies per ledger, but"),
    ({"ensembleSize": "2", "writeQuorum": "3", "ackQuorum": "2"}, "InvalidConfigurationError",
     "options ensembleSize=2, writeQuorum=3, ackQuorum=2 violate ensembleSize >= writeQuorum >= ackQuorum"),
])
def test_a_write_that_cannot_place_its_ledgers_fails_at_planning(spark, cluster, request, replication, error,
                                                                 expected):
    stream = unique_stream(request)
    before = ledger_count(cluster)
    writer = (spark.range(0, 20).repartition(2).write.format("ledger").mode("append")
              .options(metadataServiceUri=cluster.metadata_uri, password=PASSWORD, **replication))
    text = fails_on_the_driver(lambda: writer.save(stream), error, expected)
    if error == "NotEnoughBookiesError":
        assert "only 3 writable bookie(s) (3 live)" in text and "start 6 more bookie(s)" in text, text[:1500]
    assert ledger_count(cluster) == before, "a ledger was created"
    assert stream not in executor.stream_client(cluster.metadata_uri, PASSWORD).list_streams()


@pytest.mark.parametrize("replication,error,expected", [
    (Replication(4, 3, 2), "NotEnoughBookiesError",
     "is replicated on ensembleSize=4 bookies (fixed when it was created; the write's replication options do not "
     "change it), but"),
    (Replication(2, 3, 2), "InvalidConfigurationError",
     "records ensembleSize=2, writeQuorum=3, ackQuorum=2, which breaks ensembleSize >= writeQuorum >= ackQuorum"),
])
def test_a_write_to_an_existing_stream_that_cannot_place_its_ledgers_fails_at_planning(
        spark, cluster, request, replication, error, expected):
    """The stream's own replication counts (the write's options do not change it): too wide for the live bookies,
    or quorums broken in its record, the write fails on the driver naming the options, creating nothing."""
    stream = unique_stream(request)
    streams = executor.stream_client(cluster.metadata_uri, PASSWORD)
    streams.create_stream(stream, 1)
    update_stream(streams.context.store, stream,
                  lambda record: dataclasses.replace(record, replication=replication))
    before = ledger_count(cluster)
    writer = (spark.range(0, 20).repartition(2).write.format("ledger").mode("append")
              .options(metadataServiceUri=cluster.metadata_uri, password=PASSWORD))
    text = fails_on_the_driver(lambda: writer.save(stream), error, f"stream {stream!r} {expected}")
    if error == "NotEnoughBookiesError":
        assert "only 3 writable bookie(s) (3 live); start 1 more bookie(s)" in text, text[:1500]
    assert ledger_count(cluster) == before, "a ledger was created"
