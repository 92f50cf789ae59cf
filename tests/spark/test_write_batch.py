"""Batch writes through ``df.write.format("ledger")`` in Spark local mode, against real bookie processes.

The DataFrames are written by the auto-registered ``DefaultSource`` and read
back through ``spark.read.format("ledger")``; the metadata store is checked
for orphan ledgers after each write.
"""
from __future__ import annotations

import datetime as dt
import decimal

import pytest

pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.log.stream_store import read_stream  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402

pytestmark = pytest.mark.spark
PASSWORD = "batch-write"
KINDS_DDL = ("id bigint not null, b tinyint, sh smallint, i int, f float, d double, s string, bin binary, "
             "ts timestamp, ntz timestamp_ntz, day date, price decimal(20,4), big decimal(38,0), ok boolean, "
             "tags array<string>, who struct<name:string, points:array<double>, inner:struct<x:int>>, "
             "scores map<string,bigint>")


@pytest.fixture
def streams(cluster):
    return executor.stream_client(cluster.metadata_uri, PASSWORD)


@pytest.fixture
def stream(request) -> str:
    return unique_stream(request)


def writer(frame, cluster, mode="append", **options):
    options = {"metadataServiceUri": cluster.metadata_uri, "password": PASSWORD,
               **{key: str(value) for key, value in options.items()}}
    return frame.write.format("ledger").mode(mode).options(**options)


def load(spark, cluster, stream, **options):
    return (spark.read.format("ledger").option("metadataServiceUri", cluster.metadata_uri)
            .option("password", PASSWORD).options(**options).load(stream))


def orphans(streams, *names) -> set[int]:
    """Ledgers in the store that no stream's log holds (none may be left by a write)."""
    held = set()
    for name in streams.list_streams():
        held |= read_stream(streams.context.store, name).value.all_ledger_ids()
    return set(streams.client.list_ledgers()) - held


def kinds_rows():
    utc = dt.timezone.utc
    return [
        (0, 1, 2, 3, 1.5, 2.25, "ä€", b"\x00\xff", dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=utc),
         dt.datetime(2024, 5, 6, 7, 8, 9, 10), dt.date(2020, 2, 29), decimal.Decimal("12.3456"),
         decimal.Decimal("9" * 38), True, ["x", None], ("ann", [1.5, None], (7,)), {"a": 1, "b": None}),
        (1, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None),
        (2, -128, -32768, -2**31, float("-inf"), float("nan"), "", b"", dt.datetime(1970, 1, 1, tzinfo=utc),
         dt.datetime(1, 1, 1), dt.date(9999, 12, 31), decimal.Decimal("-0.0001"), decimal.Decimal(0), False,
         [], (None, [], None), {}),
    ] + [(n, n % 100, n, n * 7, n / 3, n / 7, f"row {n}", bytes([n % 256]) * (n % 5),
          dt.datetime(2000, 1, 1, tzinfo=utc) + dt.timedelta(seconds=n), dt.datetime(2001, 1, 1),
          dt.date(2000, 1, 1) + dt.timedelta(days=n), decimal.Decimal(n) / 4, decimal.Decimal(n), n % 2 == 0,
          [str(n)] * (n % 3), (f"n{n}", [float(n)], (n,)), {str(n): n}) for n in range(3, 500)]


def comparable(rows):
    """Rows as tuples with NaN made comparable."""
    def fix(value):
        return "NaN" if isinstance(value, float) and value != value else value
    return sorted((tuple(fix(value) for value in row) for row in rows), key=lambda row: row[0])


# --- round trips -------------------------------------------------------------------------------------------


def test_values_of_every_kind_round_trip(spark, cluster, streams, stream):
    frame = spark.createDataFrame(kinds_rows(), KINDS_DDL).repartition(3)
    writer(frame, cluster, rowsPerEntry=64).save(stream)
    info = streams.open_stream(stream)
    assert info.partitions == 3, "a new stream gets one partition per input partition"
    back = load(spark, cluster, stream)
    assert back.columns == frame.columns
    assert [field.dataType for field in back.schema] == [field.dataType for field in frame.schema]
    assert comparable(back.collect()) == comparable(frame.collect())
    assert not orphans(streams)


def test_rows_of_a_partition_are_read_in_the_order_written(spark, cluster, streams, stream):
    frame = spark.range(0, 3000, numPartitions=2).selectExpr("id", "spark_partition_id() AS task")
    writer(frame, cluster, rowsPerEntry=100).option("stream", stream).save()
    back = load(spark, cluster, stream, includeMetadata="true").collect()
    for partition in (0, 1):
        ids = [row.id for row in back if row._partition == partition]
        assert ids == sorted(ids) and len(ids) == 1500
        assert {row.task for row in back if row._partition == partition} == {partition}


def test_compressed_entries_hold_fewer_bytes_and_read_back_alike(spark, cluster, streams, stream):
    frame = spark.range(0, 20_000, numPartitions=2).selectExpr("id", "repeat(cast(id % 7 AS string), 50) AS text")
    sizes = {}
    for compression in ("none", "zstd"):
        writer(frame, cluster, compression=compression).save(f"{stream}-{compression}")
        back = load(spark, cluster, f"{stream}-{compression}")
        assert sorted(map(tuple, back.collect())) == sorted(map(tuple, frame.collect()))
        logs = streams.partition_logs(f"{stream}-{compression}").values()
        sizes[compression] = sum(span.length for log in logs for span in log.spans)
    assert sizes["zstd"] < sizes["none"] / 5, sizes
    assert not orphans(streams)


def test_append_twice_keeps_both_and_overwrite_replaces(spark, cluster, streams, stream):
    writer(spark.range(0, 100, numPartitions=2), cluster).save(stream)
    writer(spark.range(100, 250, numPartitions=3), cluster, partitions=9).save(stream)
    assert streams.open_stream(stream).partitions == 2  # partitions applies only when creating
    assert sorted(row.id for row in load(spark, cluster, stream).collect()) == list(range(250))
    old = read_stream(streams.context.store, stream).value.all_ledger_ids()

    writer(spark.range(1000, 1010, numPartitions=1), cluster, mode="overwrite").save(stream)
    assert sorted(row.id for row in load(spark, cluster, stream).collect()) == list(range(1000, 1010))
    assert not old & set(streams.client.list_ledgers()), "overwritten ledgers are deleted"
    assert not orphans(streams)


def test_write_creates_stream_with_the_replication_options(spark, cluster, streams, stream):
    writer(spark.range(10), cluster, partitions=4, ensembleSize=2, writeQuorum=2, ackQuorum=1,
           digest="hmac-sha256").save(stream)
    info = streams.open_stream(stream)
    assert (info.partitions, info.replication.ensemble_size, info.replication.write_quorum,
            info.replication.ack_quorum, info.replication.digest) == (4, 2, 2, 1, "hmac-sha256")
    assert sorted(row.id for row in load(spark, cluster, stream).collect()) == list(range(10))


def test_empty_dataframe_creates_the_stream_with_its_schema(spark, cluster, streams, stream):
    writer(spark.range(0).selectExpr("id", "cast(id AS string) AS s"), cluster).save(stream)
    assert load(spark, cluster, stream).schema.simpleString() == "struct<id:bigint,s:string>"
    assert load(spark, cluster, stream).count() == 0


def test_columns_in_another_order_fit_the_stream(spark, cluster, stream):
    writer(spark.range(3).selectExpr("id", "cast(id AS string) AS s"), cluster).save(stream)
    writer(spark.range(3, 5).selectExpr("cast(id AS string) AS s", "id"), cluster).save(stream)
    back = load(spark, cluster, stream).collect()
    assert sorted((row.id, row.s) for row in back) == [(n, str(n)) for n in range(5)]


# --- errors reach the user naming what to fix, before any task runs ----------------------------------------


def analysis_error(action) -> str:
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException) as caught:
        action()
    return str(caught.value)


def test_incompatible_schema_fails_before_any_task(spark, cluster, streams, stream):
    writer(spark.range(3), cluster).save(stream)
    held = read_stream(streams.context.store, stream).value
    message = analysis_error(lambda: writer(spark.range(3).selectExpr("cast(id AS string) AS id"), cluster)
                             .save(stream))
    assert f"cannot write to stream {stream!r}" in message
    assert "field 'id': the stream has int64, the data has string" in message
    assert read_stream(streams.context.store, stream).value == held
    assert not orphans(streams)


@pytest.mark.parametrize("options, fragment", [
    ({"rowsPerEntry": "0"}, "option rowsPerEntry='0' is invalid"),
    ({"ensembleSize": "2"}, "ensembleSize=2, writeQuorum=3 (default)"),
    ({"digest": "sha1"}, "option digest='sha1' is invalid"),
    ({"compression": "gzip"}, "option compression='gzip' is invalid"),
    ({"startingOffsets": "latest"}, "option startingOffsets does not apply to a batch write"),
    ({"writerId": "x"}, "option writerId does not apply to a batch write"),
    ({"partitons": "3"}, "did you mean partitions?"),
])
def test_bad_option_fails_naming_it(spark, cluster, stream, options, fragment):
    assert fragment in analysis_error(lambda: writer(spark.range(1), cluster, **options).save(stream))


def test_missing_required_options_are_named(spark, cluster):
    frame = spark.range(1)
    message = analysis_error(lambda: frame.write.format("ledger").mode("append").save("orders"))
    assert "option metadataServiceUri is required for a batch write" in message
    message = analysis_error(lambda: frame.write.format("ledger").mode("append")
                             .option("metadataServiceUri", cluster.metadata_uri).save())
    assert "option stream is required for a batch write" in message
