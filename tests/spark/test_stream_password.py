"""A stream knows its password: Spark reads and writes with another one fail on the driver at planning.

A stream is written through Spark with password A (the commit that creates it
records a check of A). Writes (batch and streaming) and reads (batch, with or
without a user schema, and streaming) with password B then fail with one
message naming the option password and the stream, before any task runs, and
no ledger is created; the stream still reads whole with A, and A writes on.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.log.stream_password import stream_password_check  # noqa: E402
from pyspark_ledger.log.stream_store import read_stream  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402

pytestmark = pytest.mark.spark
RIGHT, WRONG = "stream-password-A", "stream-password-B"
#: How Spark reports an error of the data source's code on the driver (never a task failure).
DRIVER_ERRORS = ("PYTHON_DATA_SOURCE_ERROR", "PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR")
QUERY_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def written(spark, cluster, request):
    """(stream name, ids written): a stream created by a Spark write with password RIGHT, 2 partitions."""
    name = unique_stream(request)
    options(spark.range(0, 50).repartition(2).write.format("ledger").mode("append"), cluster, RIGHT,
            partitions="2").save(name)
    return name, list(range(50))


def options(builder, cluster, password: str, **more):
    return builder.options(metadataServiceUri=cluster.metadata_uri, password=password,
                           **{key: str(value) for key, value in more.items()})


def ledger_count(cluster) -> int:
    return len(executor.ledger_client(cluster.metadata_uri).list_ledgers())


def refused_at_planning(cluster, stream: str, action) -> str:
    """Run ``action``; it must fail naming the option and the stream, from the driver, creating no ledger."""
    before = ledger_count(cluster)
    with pytest.raises(Exception) as caught:
        action()
    text = str(caught.value)
    expected = f"UnauthorizedError: option password does not match the password of stream {stream!r}"
    assert expected in text, f"not the one expected error ({expected!r}): {text[:1500]}"
    assert text.count("UnauthorizedError:") == 1, f"one message, not a chain of them: {text[:1500]}"
    assert "Task" not in text.split("Traceback")[0] and "Job aborted" not in text, f"a task ran: {text[:1500]}"
    assert any(marker in text for marker in DRIVER_ERRORS), text[:1500]
    assert WRONG not in text and RIGHT not in text, "a password was shown"
    assert ledger_count(cluster) == before, "a ledger was created"
    return text


def read_ids(spark, cluster, stream: str, password: str = RIGHT) -> list[int]:
    return sorted(row.id for row in options(spark.read.format("ledger"), cluster, password).load(stream).collect())


def run_to_end(query) -> None:
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query neither failed nor finished"
    finally:
        query.stop()
    if query.exception() is not None:
        raise query.exception()


def test_the_check_is_in_the_record_not_the_password(cluster, written):
    stream, _ = written
    store = executor.stream_client(cluster.metadata_uri, RIGHT).context.store
    raw = store.get(f"streams/{stream}").value
    assert RIGHT.encode() not in raw and WRONG.encode() not in raw
    check = read_stream(store, stream).value.password_check
    assert check is not None and check.startswith("sha256$")
    assert check == stream_password_check(RIGHT.encode(), bytes.fromhex(check.split("$")[1]))


def test_writes_with_another_password_fail_at_planning_and_create_nothing(spark, cluster, written, tmp_path):
    stream, ids = written
    held = read_stream(executor.stream_client(cluster.metadata_uri, RIGHT).context.store, stream).value
    for mode in ("append", "overwrite"):
        refused_at_planning(cluster, stream, lambda: options(
            spark.range(100, 110).write.format("ledger").mode(mode), cluster, WRONG).save(stream))

    source = tmp_path / "input"
    source.mkdir()
    (source / "f0.json").write_text("\n".join(json.dumps({"id": i}) for i in range(200, 210)) + "\n")

    def streaming_write():
        frame = spark.readStream.schema("id bigint").json(str(source))
        run_to_end(options(frame.writeStream.format("ledger"), cluster, WRONG, stream=stream,
                           checkpointLocation=tmp_path / "checkpoint").trigger(availableNow=True).start())

    refused_at_planning(cluster, stream, streaming_write)
    after = read_stream(executor.stream_client(cluster.metadata_uri, RIGHT).context.store, stream).value
    assert after == held, "the stream record changed"
    assert read_ids(spark, cluster, stream) == ids, "the stream no longer reads whole with its password"


def test_reads_with_another_password_fail_at_planning(spark, cluster, written, tmp_path):
    stream, _ = written
    refused_at_planning(cluster, stream, lambda: read_ids(spark, cluster, stream, WRONG))
    refused_at_planning(cluster, stream, lambda: options(spark.read.format("ledger").schema("id bigint"),
                                                         cluster, WRONG).load(stream).collect())

    def streaming_read():
        frame = options(spark.readStream.format("ledger"), cluster, WRONG, stream=stream).load()
        run_to_end(frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
                   .trigger(availableNow=True).start())

    refused_at_planning(cluster, stream, streaming_read)


def test_the_right_password_reads_whole_and_writes_on(spark, cluster, written):
    stream, ids = written
    options(spark.range(50, 60).write.format("ledger").mode("append"), cluster, RIGHT).save(stream)
    assert read_ids(spark, cluster, stream) == ids + list(range(50, 60))


def test_the_password_option_does_not_show_in_the_query_plan(spark, cluster, written):
    """The threat model says so: a read's plan (``explain``, the query execution Spark logs and shows in its UI)
    does not carry the password option's value."""
    name, _ = written
    frame = options(spark.read.format("ledger"), cluster, RIGHT).load(name)
    plans = frame._jdf.queryExecution().toString()
    assert "ledger" in plans.lower() or "Python" in plans, plans[:500]
    assert RIGHT not in plans, "the password shows in the query plan"
