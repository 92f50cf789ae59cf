"""``format("ledger")`` on Spark 4.0/4.1: the fallbacks and clear errors of ``compat``, checked on any Spark.

The missing APIs are simulated (monkeypatch), so these tests need no other
Spark than the installed one. The end-to-end tests run a real query through
a data source wired as on Spark 4.0/4.1 (the stream reader without admission
control, the stream writer on the 4.0 base class): the installed Spark then
drives them through the same paths an older Spark takes (old-style
``latestOffset()``, Arrow batches chosen by ``isinstance(DataSourceArrowWriter)``).
"""
from __future__ import annotations

import inspect
import json

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql import datasource as spark_datasource  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from pyspark_ledger import DefaultSource  # noqa: E402
from pyspark_ledger.errors import InternalError, InvalidConfigurationError  # noqa: E402
from pyspark_ledger.spark import compat, executor, reader_choice  # noqa: E402
from pyspark_ledger.spark.options import parse_read_options  # noqa: E402
from pyspark_ledger.spark.schema import spark_to_arrow_schema  # noqa: E402
from pyspark_ledger.spark.sink import LedgerStreamWriter, stream_writer  # noqa: E402
from pyspark_ledger.spark.stream_reader import LedgerStreamReader  # noqa: E402
from pyspark_ledger.testing.spark import register_data_source  # noqa: E402
from tests.spark.read_helpers import (PASSWORD, append_rows, read_options, three_ledger_stream,  # noqa: E402
                                      unique_stream, wait_until)

URI = "zk://127.0.0.1:2181/ledgers"
STRUCT = T.StructType([T.StructField("id", T.LongType()), T.StructField("at", T.TimestampType()),
                       T.StructField("local", T.TimestampNTZType()), T.StructField("name", T.StringType())])
QUERY_TIMEOUT_S = 120


def stream_options(**extra) -> dict[str, str]:
    return {"metadataServiceUri": URI, "stream": "events", **extra}


@pytest.fixture
def without_admission_control(monkeypatch):
    """As on Spark 4.0/4.1: no pyspark.sql.streaming.datasource (latestOffset(start, limit), ReadLimit)."""
    monkeypatch.setattr(compat, "has_admission_control", lambda: False)
    monkeypatch.setattr(compat, "spark_version", lambda: "4.1.4")


# --- schemas: to_arrow_schema(timezone=) is 4.2+, 4.0/4.1 take timestamp_utc=True ---------------------------


def old_to_arrow_schema(calls: list):
    """``to_arrow_schema`` with Spark 4.0/4.1's signature, answering as the installed one does for UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema as installed

    def to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=False, timestamp_utc=True,
                        prefers_large_types=False):
        calls.append(timestamp_utc)
        return compat.spark_arrow_schema(schema, "UTC", to_arrow_schema=installed)
    return to_arrow_schema


def test_the_arrow_schema_on_an_old_spark_keeps_utc_timestamps(monkeypatch):
    import pyspark.sql.pandas.types as pandas_types

    expected = spark_to_arrow_schema(STRUCT)
    assert expected.field("at").type == pa.timestamp("us", tz="UTC")
    assert expected.field("local").type == pa.timestamp("us")
    calls: list = []
    monkeypatch.setattr(pandas_types, "to_arrow_schema", old_to_arrow_schema(calls))
    assert spark_to_arrow_schema(STRUCT).equals(expected)
    assert calls == [True]


def test_an_old_spark_refuses_another_timezone_naming_the_version(monkeypatch):
    monkeypatch.setattr(compat, "spark_version", lambda: "4.0.5")
    with pytest.raises(InvalidConfigurationError, match=r"Spark 4\.0\.5 stores timestamps in UTC only.*4\.2"):
        compat.spark_arrow_schema(STRUCT, "Europe/Paris", to_arrow_schema=old_to_arrow_schema([]))


# --- stream readers: admission control is 4.2+ ------------------------------------------------------------------


def test_spark_with_admission_control_gets_the_full_reader():
    if not compat.has_admission_control():
        pytest.skip(f"Spark {compat.spark_version()} has no admission control")
    from pyspark_ledger.spark.stream_admission import AdmissionControlledStreamReader

    options = parse_read_options(stream_options(maxEntriesPerTrigger="4"), streaming=True)
    assert reader_choice.stream_reader_class(options) is AdmissionControlledStreamReader
    assert isinstance(DefaultSource(stream_options()).streamReader(STRUCT), AdmissionControlledStreamReader)


def test_an_old_spark_gets_the_reader_with_the_old_latest_offset(without_admission_control):
    reader = DefaultSource(stream_options(startingOffsets="earliest")).streamReader(STRUCT)
    assert type(reader) is LedgerStreamReader
    # Spark takes the pre-4.2 API when latestOffset has no parameters
    assert len(inspect.signature(reader.latestOffset).parameters) == 0
    assert not hasattr(reader, "prepareForTriggerAvailableNow")


@pytest.mark.parametrize("given, named", [
    ({"maxEntriesPerTrigger": "4"}, "option maxEntriesPerTrigger needs Spark 4.2"),
    ({"maxBytesPerTrigger": "1m"}, "option maxBytesPerTrigger needs Spark 4.2"),
    ({"maxEntriesPerTrigger": "4", "maxBytesPerTrigger": "1m"},
     "option maxEntriesPerTrigger and maxBytesPerTrigger needs Spark 4.2"),
])
def test_per_trigger_limits_on_an_old_spark_fail_naming_option_and_version(without_admission_control, given,
                                                                          named):
    with pytest.raises(InvalidConfigurationError) as caught:
        DefaultSource(stream_options(**given)).streamReader(STRUCT)
    message = str(caught.value)
    assert named in message
    assert "this is Spark 4.1.4" in message and "upgrade Spark" in message


# --- stream writers: DataSourceStreamArrowWriter is 4.1+ ---------------------------------------------------------


def test_spark_4_0_gets_a_stream_writer_base_fed_arrow_batches(monkeypatch):
    monkeypatch.delattr(spark_datasource, "DataSourceStreamArrowWriter", raising=False)
    base = compat.stream_arrow_writer_base(spark_datasource)
    assert base is compat.StreamArrowWriterFallback
    # what 4.0's streaming sink expects, and what makes its write worker pass Arrow batches
    assert issubclass(base, spark_datasource.DataSourceStreamWriter)
    assert issubclass(base, spark_datasource.DataSourceArrowWriter)


def test_spark_4_1_and_later_get_their_own_stream_arrow_writer():
    native = getattr(spark_datasource, "DataSourceStreamArrowWriter", None)
    if native is None:
        pytest.skip(f"Spark {compat.spark_version()} has no DataSourceStreamArrowWriter")
    assert compat.stream_arrow_writer_base(spark_datasource) is native
    assert issubclass(LedgerStreamWriter, native)


def test_rows_handed_to_the_stream_writer_fail_clearly():
    batch = pa.RecordBatch.from_pylist([{"id": 1}])
    assert list(compat.arrow_batches([batch, batch])) == [batch, batch]
    with pytest.raises(InternalError, match=r"handed the ledger stream writer a Row, not an Arrow"):
        list(compat.arrow_batches([batch, Row(id=2)]))


# --- end to end: a source wired as on Spark 4.0/4.1, driven by the installed Spark ------------------------------


class Spark40StreamWriter(compat.StreamArrowWriterFallback):
    """``LedgerStreamWriter`` on Spark 4.0's base: not a ``DataSourceStreamArrowWriter``."""

    __init__ = LedgerStreamWriter.__init__
    write = LedgerStreamWriter.write
    commit = LedgerStreamWriter.commit
    abort = LedgerStreamWriter.abort


class Spark40LedgerSource(DefaultSource):
    """``format("ledger")`` as on Spark 4.0: the old-API stream reader, the 4.0 stream writer."""

    @classmethod
    def name(cls) -> str:
        return "ledger_as_on_spark_4_0"

    def streamReader(self, schema):
        return LedgerStreamReader(parse_read_options(dict(self.options), streaming=True), schema)

    def streamWriter(self, schema, overwrite: bool):
        writer = stream_writer(dict(self.options), schema, overwrite)
        return Spark40StreamWriter(writer.plan, writer.options)


def test_the_spark_4_0_writer_is_not_a_stream_arrow_writer():
    native = getattr(spark_datasource, "DataSourceStreamArrowWriter", None)
    assert native is None or not issubclass(Spark40StreamWriter, native)


@pytest.fixture(scope="module")
def old_source(spark):
    register_data_source(spark, Spark40LedgerSource)
    return Spark40LedgerSource.name()


@pytest.fixture
def streams(cluster):
    return executor.stream_client(cluster.metadata_uri, PASSWORD)


@pytest.fixture
def stream(request, streams):
    return three_ledger_stream(request, streams)


@pytest.fixture
def started(tmp_path):
    queries = []
    try:
        yield queries
    finally:
        for query in queries:
            query.stop()


def collect_into(rows: list):
    def sink(frame, batch_id):
        rows.extend(tuple(row) for row in frame.collect())
    return sink


def read_query(spark, source, cluster, stream, trigger, rows, checkpoint):
    frame = spark.readStream.format(source).options(**read_options(cluster.metadata_uri, stream)).load()
    return (frame.writeStream.foreachBatch(collect_into(rows)).trigger(**trigger)
            .option("checkpointLocation", str(checkpoint)).start())


@pytest.mark.spark
def test_available_now_with_the_old_reader_reads_everything_and_stops(spark, old_source, cluster, stream,
                                                                     started, tmp_path):
    rows: list = []
    query = read_query(spark, old_source, cluster, stream, {"availableNow": True}, rows, tmp_path / "cp")
    started.append(query)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "an availableNow query must stop by itself"
    assert query.exception() is None
    assert sorted(rows) == sorted([(0, seq, f"p0-row{seq}") for seq in range(30)]
                                  + [(1, seq, f"p1-row{seq}") for seq in range(15)])


@pytest.mark.spark
def test_the_old_reader_reads_rows_appended_while_the_query_runs(spark, old_source, cluster, streams, stream,
                                                                started, tmp_path):
    rows: list = []
    query = read_query(spark, old_source, cluster, stream, {"processingTime": "200 milliseconds"}, rows,
                       tmp_path / "cp")
    started.append(query)
    wait_until(lambda: len(rows) == 45 or query.exception(), what="the rows written before the start")
    append_rows(streams, stream, 1, 15, 2, 5)
    wait_until(lambda: len(rows) == 55 or query.exception(), what="the rows appended while running")
    assert query.exception() is None
    assert sorted(seq for partition, seq, _ in rows if partition == 1) == list(range(25))


@pytest.mark.spark
def test_the_spark_4_0_stream_writer_gets_arrow_batches_and_commits_once(spark, old_source, cluster, request,
                                                                        tmp_path):
    name, source = unique_stream(request), tmp_path / "in"
    source.mkdir()
    (source / "f0.json").write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in range(50)))
    frame = spark.readStream.schema("id bigint, name string").json(str(source))
    query = (frame.writeStream.format(old_source).option("metadataServiceUri", cluster.metadata_uri)
             .option("password", PASSWORD).option("stream", name).option("rowsPerEntry", "16")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    written = (spark.read.format("ledger").option("metadataServiceUri", cluster.metadata_uri)
               .option("password", PASSWORD).load(name))
    assert sorted(row.id for row in written.collect()) == list(range(50))
