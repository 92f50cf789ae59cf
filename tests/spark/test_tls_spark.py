"""A Spark job end to end over mutual TLS: batch write, batch read, streaming read and the streaming sink,
against a sandbox of bookies that require client certificates; and a bad TLS option failing on the driver."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.sandbox import Sandbox  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

pytestmark = pytest.mark.spark
PASSWORD = "tls-job"
QUERY_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def tls_cluster():
    """Three mutual-TLS bookies (the sandbox's throwaway CA); the executor clients of it closed with it."""
    sandbox = Sandbox(bookies=3, tls=True).start()
    try:
        from pyspark_ledger import LedgerClient

        with LedgerClient(sandbox.metadata_uri, sandbox.client_config()) as client:
            wait_until(lambda: len(client.bookies(writable_only=True)) >= 3, what="three writable bookies")
        yield sandbox
    finally:
        executor.close_all(sandbox.metadata_uri)
        sandbox.stop()


def options(cluster, **extra) -> dict:
    tls = cluster.tls_files
    return {"metadataServiceUri": cluster.metadata_uri, "password": PASSWORD, "tlsCa": str(tls.ca),
            "tlsCert": str(tls.client_cert), "tlsKey": str(tls.client_key), **extra}


def read_ids(spark, cluster, stream) -> list[int]:
    frame = spark.read.format("ledger").options(**options(cluster)).load(stream)
    return sorted(row.id for row in frame.collect())


def test_batch_write_batch_read_and_streaming_read_over_mtls(spark, tls_cluster, request, tmp_path):
    stream = unique_stream(request)
    (spark.range(0, 300, numPartitions=3).write.format("ledger").mode("append")
     .options(**options(tls_cluster, ensembleSize="3", writeQuorum="3", ackQuorum="2")).save(stream))
    assert read_ids(spark, tls_cluster, stream) == list(range(300))

    query = (spark.readStream.format("ledger").options(**options(tls_cluster)).load(stream)
             .writeStream.format("memory").queryName("tls_stream_read")
             .option("checkpointLocation", str(tmp_path / "read-checkpoint")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow read did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(row.id for row in spark.table("tls_stream_read").collect()) == list(range(300))


def test_the_streaming_sink_over_mtls(spark, tls_cluster, request, tmp_path):
    stream = unique_stream(request)
    source = tmp_path / "input"
    source.mkdir()
    (source / "rows.json").write_text("\n".join(json.dumps({"id": i, "name": f"r{i}"}) for i in range(120)) + "\n")
    query = (spark.readStream.schema("id bigint, name string").json(str(source))
             .writeStream.format("ledger").options(**options(tls_cluster, stream=stream))
             .option("checkpointLocation", str(tmp_path / "sink-checkpoint")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow write did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    assert read_ids(spark, tls_cluster, stream) == list(range(120))


@pytest.mark.parametrize("option", ["tlsCa", "tlsCert", "tlsKey"])
def test_an_unreadable_tls_file_fails_on_the_driver_naming_the_option(spark, tls_cluster, request, tmp_path, option):
    from pyspark.errors import PySparkException

    stream = unique_stream(request)
    broken = options(tls_cluster, **{option: str(tmp_path / "missing.pem")})
    with pytest.raises(PySparkException) as caught:
        spark.range(3).write.format("ledger").mode("append").options(**broken).save(stream)
    assert f"{option} '{tmp_path / 'missing.pem'}': cannot read it" in str(caught.value)
    with pytest.raises(PySparkException) as caught:
        spark.read.format("ledger").options(**broken).load(stream).collect()
    assert f"{option} '" in str(caught.value)
