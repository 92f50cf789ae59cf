"""The in-memory Arrow data source of the benchmarks reads and writes N rows through Spark."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark.sql.datasource")
from bench import arrow_memory_source as memory  # noqa: E402


@pytest.fixture(scope="module")
def memory_format(spark):
    memory.register(spark)
    return memory.NAME


def test_reads_exactly_n_rows_with_distinct_ids(spark, memory_format):
    rows = 123_457  # not a multiple of the batch size or the partition count
    frame = (spark.read.format(memory_format).option("rows", rows).option("partitions", 3)
             .option("rowsPerBatch", 10_000).option("payloadBytes", 16).load())
    assert frame.schema.simpleString() == "struct<id:bigint,payload:binary>"
    assert frame.rdd.getNumPartitions() == 3
    stats = frame.selectExpr("count(*) AS n", "count(DISTINCT id) AS ids", "min(id) AS lo", "max(id) AS hi",
                             "min(length(payload)) AS short", "max(length(payload)) AS long").first()
    assert stats.asDict() == {"n": rows, "ids": rows, "lo": 0, "hi": rows - 1, "short": 16, "long": 16}


def test_string_payloads(spark, memory_format):
    frame = spark.read.format(memory_format).option("rows", 5000).option("payloadType", "string").load()
    assert frame.schema.simpleString() == "struct<id:bigint,payload:string>"
    assert frame.selectExpr("count(*) AS n", "min(payload) AS lo", "max(length(payload)) AS long").first().asDict() \
        == {"n": 5000, "lo": "Z" * 100, "long": 100}


def test_zero_rows(spark, memory_format):
    assert spark.read.format(memory_format).option("rows", 0).load().count() == 0


def test_counting_writer_sees_every_row(spark, memory_format, tmp_path):
    result = tmp_path / "written.json"
    spark.read.format(memory_format).option("rows", 25_000).option("rowsPerBatch", 1000).load() \
        .write.format(memory_format).option("resultPath", str(result)).mode("append").save()
    totals = json.loads(result.read_text())
    assert totals["rows"] == 25_000 and totals["batches"] >= 2


def test_measure_reports_its_figures(spark, memory_format, tmp_path):
    figures = memory.measure(spark, 20_000, result_path=str(tmp_path / "m.json"))
    assert figures["rows"] == 20_000
    for key in ("read_rows_per_s", "read_seconds", "read_then_write_rows_per_s", "read_then_write_seconds"):
        assert isinstance(figures[key], (int, float)), key
    assert json.loads((tmp_path / "m.json").read_text())["rows"] == 20_000


def test_bad_option_is_named(spark, memory_format):
    with pytest.raises(Exception, match="option rowsperbatch='ten' of format 'arrow_memory'"):
        spark.read.format(memory_format).option("rowsPerBatch", "ten").load().count()
    with pytest.raises(Exception, match="option payloadType='text' of format 'arrow_memory'"):
        spark.read.format(memory_format).option("payloadType", "text").load().count()
