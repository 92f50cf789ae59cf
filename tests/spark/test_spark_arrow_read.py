"""Real Spark accepts the Arrow batches our schema normalisation and codec produce.

Two throwaway Python data sources stand in for the ledger source: entries are
files of length-prefixed payloads encoded by ``arrow_codec``; the reader
decodes them and conforms each batch with ``schema``; the writer cuts Spark's
Arrow batches into entries the way the ledger writer will. This pins the fact
that Spark refuses any first batch whose Arrow schema is not exactly its own.
"""
from __future__ import annotations

import datetime as dt
import decimal
import os
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")  # the connector's extra: pip install 'pyspark-ledger[spark]'

from pyspark_ledger.log.stream_schema import decode_stream_schema, encode_stream_schema, stored_schema  # noqa: E402
from pyspark_ledger.spark.arrow_codec import decode_batch, encode_batch, entry_batches  # noqa: E402
from pyspark_ledger.spark.schema import (add_metadata_columns, check_compatible, conform_batch,  # noqa: E402
                                         read_arrow_schema, read_spark_schema, spark_to_arrow_schema)
from pyspark_ledger.testing.spark import register_data_source  # noqa: E402

pytestmark = pytest.mark.spark
pyspark_datasource = pytest.importorskip("pyspark.sql.datasource")
FRAME_HEADER = 8  # a big-endian payload length before each payload (module globals must pickle)
LEDGER_ID_BASE = 7_000_000_000


# --- entry files: what the log layer will be, reduced to files --------------------------------


def append_entries(path: Path, payloads) -> None:
    with open(path, "ab") as out:
        for payload in payloads:
            out.write(len(payload).to_bytes(FRAME_HEADER, "big"))
            out.write(payload)


def read_entries(path: Path):
    data = Path(path).read_bytes()
    offset = 0
    while offset < len(data):
        size = int.from_bytes(data[offset:offset + FRAME_HEADER], "big")
        yield data[offset + FRAME_HEADER: offset + FRAME_HEADER + size]
        offset += FRAME_HEADER + size


def schema_file(folder) -> Path:
    return Path(folder) / "schema.arrow"


def entry_files(folder) -> list[Path]:
    return sorted(Path(folder).glob("entries-*.bin"))


# --- the throwaway data sources ------------------------------------------------------------------


class EntryFilesReader(pyspark_datasource.DataSourceReader):
    def __init__(self, folder: str, include_metadata: bool, conform: bool) -> None:
        self.folder, self.include_metadata, self.conform = folder, include_metadata, conform

    def partitions(self):
        return [pyspark_datasource.InputPartition(str(path)) for path in entry_files(self.folder)]

    def read(self, partition):
        stored = decode_stream_schema(schema_file(self.folder).read_bytes())
        number = int(Path(partition.value).stem.split("-")[1])
        for entry_id, payload in enumerate(read_entries(partition.value)):
            batch = decode_batch(payload)
            if self.conform:
                batch = conform_batch(batch, stored)
            if self.include_metadata:
                batch = add_metadata_columns(batch, number, LEDGER_ID_BASE + number, entry_id)
            yield batch


class EntryFilesWriter(pyspark_datasource.DataSourceArrowWriter):
    def __init__(self, folder: str, stored: pa.Schema, rows_per_entry: int) -> None:
        self.folder, self.stored, self.rows_per_entry = folder, stored, rows_per_entry

    def write(self, iterator):
        from pyspark import TaskContext

        context = TaskContext.get()
        path = Path(self.folder) / f"entries-{context.partitionId():04d}{context.attemptNumber()}" \
                                   f"{os.getpid() % 1000:03d}.bin"
        conformed = (conform_batch(batch, self.stored) for batch in iterator)
        append_entries(path, (encode_batch(batch) for batch in entry_batches(conformed, self.rows_per_entry)))
        return pyspark_datasource.WriterCommitMessage()


class EntryFilesSource(pyspark_datasource.DataSource):
    @classmethod
    def name(cls):
        return "ledger_test_entries"

    def schema(self):
        stored = decode_stream_schema(schema_file(self.options["folder"]).read_bytes())
        return read_spark_schema(stored, include_metadata=self.options.get("includemetadata") == "true")

    def reader(self, schema):
        return EntryFilesReader(self.options["folder"], self.options.get("includemetadata") == "true",
                                self.options.get("conform", "true") == "true")

    def writer(self, schema, overwrite):
        folder = self.options["folder"]
        incoming = spark_to_arrow_schema(schema)
        if schema_file(folder).exists():
            existing = decode_stream_schema(schema_file(folder).read_bytes())
            check_compatible(existing, incoming, stream=folder)
        else:
            schema_file(folder).write_bytes(encode_stream_schema(incoming))
        stored = decode_stream_schema(schema_file(folder).read_bytes())
        return EntryFilesWriter(folder, stored, int(self.options.get("rowsperentry", "10000")))


@pytest.fixture(scope="module")
def entries_format(spark):
    register_data_source(spark, EntryFilesSource)
    return "ledger_test_entries"


# --- data with every type --------------------------------------------------------------------------

UTC = dt.timezone.utc
RAW_SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), pa.field("tiny", pa.int8()), pa.field("small", pa.int16()),
    pa.field("n", pa.int32()), pa.field("f", pa.float32()), pa.field("d", pa.float64()),
    pa.field("ok", pa.bool_()), pa.field("name", pa.large_string()), pa.field("blob", pa.large_binary()),
    pa.field("day", pa.date32()), pa.field("ts", pa.timestamp("ns", tz="Asia/Tokyo")),
    pa.field("local", pa.timestamp("ms")), pa.field("price", pa.decimal128(12, 3)),
    pa.field("big", pa.decimal128(38, 0)), pa.field("void", pa.null()),
    pa.field("tags", pa.large_list(pa.large_string())),
    pa.field("scores", pa.map_(pa.string(), pa.int64())),
    pa.field("who", pa.struct([pa.field("id", pa.int32(), nullable=False),
                               pa.field("where", pa.struct([pa.field("city", pa.string()),
                                                            pa.field("points", pa.list_(pa.float64()))]))])),
    pa.field("wait", pa.duration("s")),
])


def row(i: int) -> dict:
    if i % 4 == 3:  # a row of nulls wherever allowed
        return {"id": i, "who": None}
    return {
        "id": i, "tiny": i % 100 - 50, "small": -i, "n": i * 1000, "f": i / 4, "d": i / 3,
        "ok": i % 2 == 0, "name": f"name-{i}-é", "blob": bytes([i % 256, 0, 255]),
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i), "ts": dt.datetime(2024, 3, 1, 12, tzinfo=UTC)
        + dt.timedelta(seconds=i, microseconds=7), "local": dt.datetime(2001, 2, 3, 4, 5, 6, 789000),
        "price": decimal.Decimal(i) / 8, "big": decimal.Decimal(10**37 * 9 + i), "void": None,
        "tags": [f"t{i}", None] if i % 2 else [], "scores": [("a", i), ("b", None)],
        "who": {"id": i, "where": {"city": None if i % 5 == 0 else "Oslo", "points": [i / 2, None]}},
        "wait": dt.timedelta(seconds=i),
    }


def raw_batch(first: int, rows: int) -> pa.RecordBatch:
    table = pa.Table.from_pylist([row(i) for i in range(first, first + rows)], schema=RAW_SCHEMA)
    return table.combine_chunks().to_batches()[0]


@pytest.fixture
def written_folder(tmp_path):
    """Two 'partitions' of entries encoded from raw (non-Spark-typed) batches, 10 rows per entry."""
    stored = stored_schema(RAW_SCHEMA)
    schema_file(tmp_path).write_bytes(encode_stream_schema(stored))
    for number, first in enumerate((0, 25)):
        pieces = entry_batches([raw_batch(first, 25)], rows_per_entry=10)
        append_entries(tmp_path / f"entries-{number}.bin", (encode_batch(piece) for piece in pieces))
    return tmp_path


def expected_table(include_metadata: bool) -> pa.Table:
    stored = stored_schema(RAW_SCHEMA)
    batches = []
    for number, first in enumerate((0, 25)):
        for entry_id, piece in enumerate(entry_batches([raw_batch(first, 25)], rows_per_entry=10)):
            batch = conform_batch(piece, stored)
            if include_metadata:
                batch = add_metadata_columns(batch, number, LEDGER_ID_BASE + number, entry_id)
            batches.append(batch)
    return pa.Table.from_batches(batches, schema=read_arrow_schema(stored, include_metadata=include_metadata))


@pytest.mark.parametrize("include_metadata", [False, True])
def test_spark_accepts_conformed_batches_of_every_type(spark, entries_format, written_folder, include_metadata):
    frame = (spark.read.format(entries_format).option("folder", str(written_folder))
             .option("includeMetadata", str(include_metadata).lower()).load())
    got = frame.orderBy("id").toArrow()
    expected = expected_table(include_metadata)
    assert got.num_rows == 50
    assert got.column_names == expected.column_names
    assert got.cast(expected.schema).equals(expected.combine_chunks())
    if include_metadata:
        ids = frame.where("id = 27").select("_partition", "_ledger_id", "_entry_id").collect()
        assert [tuple(r) for r in ids] == [(1, LEDGER_ID_BASE + 1, 0)]


def test_spark_refuses_batches_that_were_not_conformed(spark, entries_format, written_folder):
    frame = (spark.read.format(entries_format).option("folder", str(written_folder))
             .option("conform", "false").load())
    with pytest.raises(Exception, match="DATA_SOURCE_RETURN_SCHEMA_MISMATCH"):
        frame.collect()


# --- writing through Spark's Arrow writer and reading back ----------------------------------------------


@pytest.fixture
def new_york_session(spark):
    """Spark hands writers timestamps in the session time zone: use one that is not UTC."""
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_write_with_spark_then_read_back(new_york_session, entries_format, tmp_path):
    spark = new_york_session
    source = spark.createDataFrame(pa.Table.from_batches([raw_batch(0, 40)]).drop_columns(["void", "wait"]))
    source = source.repartition(2, "id")
    source.write.format(entries_format).option("folder", str(tmp_path)).option("rowsPerEntry", "7") \
        .mode("append").save()
    reordered = spark.createDataFrame(pa.Table.from_batches([raw_batch(40, 9)]).drop_columns(["void", "wait"]))
    reordered.select(*reversed(reordered.columns)).write.format(entries_format) \
        .option("folder", str(tmp_path)).mode("append").save()

    stored = decode_stream_schema(schema_file(tmp_path).read_bytes())
    assert all(field.nullable for field in stored) and stored.field("ts").type.tz == "UTC"
    frames = [decode_batch(payload) for path in entry_files(tmp_path) for payload in read_entries(path)]
    assert max(batch.num_rows for batch in frames) == 7 and sum(b.num_rows for b in frames) == 49

    back = spark.read.format(entries_format).option("folder", str(tmp_path)).load()
    expected = source.unionByName(reordered).orderBy("id")
    assert back.orderBy("id").collect() == expected.collect()


def test_writing_an_incompatible_frame_lists_the_differences(spark, entries_format, tmp_path):
    spark.createDataFrame([(1, "a")], "id bigint, name string").write.format(entries_format) \
        .option("folder", str(tmp_path)).mode("append").save()
    other = spark.createDataFrame([(1, 2.5, True)], "id int, name double, extra boolean")
    with pytest.raises(Exception) as caught:
        other.write.format(entries_format).option("folder", str(tmp_path)).mode("append").save()
    message = str(caught.value)
    assert "field 'id': the stream has int64, the data has int32" in message
    assert "field 'name': the stream has string, the data has double" in message
    assert "the stream has no field 'extra' (bool)" in message
