"""The save modes of a batch write, as the README states them (a guard: neither may drift from the other).

The README says: ``mode("append")`` and ``mode("overwrite")`` work; Spark
itself refuses ``ErrorIfExists`` (its default, also when no mode is given) and
``Ignore`` for a Python data source, onto a new stream as onto an existing
one, on the driver, naming the modes that work, with nothing written. These
tests hold Spark and the sink to that and the README to these words. If a
Spark version starts handing ``ErrorIfExists`` to the source, they fail: the
sink must then refuse an existing stream itself (naming ``mode("append")``)
and the README change with it.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402

pytestmark = pytest.mark.spark
PASSWORD = "save-modes"
README = Path(__file__).resolve().parents[2] / "README.md"
REFUSED = {None: "ErrorIfExists", "errorifexists": "ErrorIfExists", "error": "ErrorIfExists",
           "default": "ErrorIfExists", "ignore": "Ignore"}  # mode() argument -> the mode Spark names


def save(spark, cluster, stream: str, mode: str | None, rows: int = 5) -> None:
    writer = spark.range(0, rows).write.format("ledger").options(metadataServiceUri=cluster.metadata_uri,
                                                                  password=PASSWORD)
    (writer if mode is None else writer.mode(mode)).save(stream)


def row_count(spark, cluster, stream: str) -> int:
    return (spark.read.format("ledger").options(metadataServiceUri=cluster.metadata_uri, password=PASSWORD)
            .load(stream).count())


def ledger_count(cluster) -> int:
    return len(executor.ledger_client(cluster.metadata_uri).list_ledgers())


def streams(cluster) -> list[str]:
    return executor.stream_client(cluster.metadata_uri, PASSWORD).list_streams()


def refused_on_the_driver(action, spark_mode: str) -> str:
    """``action`` must fail before any task with Spark's one-line refusal of ``spark_mode``, naming Append."""
    with pytest.raises(Exception) as caught:
        action()
    text = str(caught.value)
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in text, text[:1500]
    assert f'cannot be written in the "{spark_mode}" mode' in text and '"Append"' in text, text[:1500]
    assert "Job aborted" not in text and "Task" not in text, f"a task ran: {text[:1500]}"
    return text


def test_the_readme_states_which_modes_work_and_which_spark_refuses():
    text = README.read_text()
    paragraph = text[text.index("A batch write needs a save mode"):]
    paragraph = " ".join(paragraph[:paragraph.index("\n\n")].split())  # line breaks do not matter
    assert re.findall(r'`mode\("(\w+)"\)`', paragraph)[:2] == ["append", "overwrite"], paragraph
    for words in ("refuses its default mode", "`ErrorIfExists`, also when no mode is given", "`Ignore`",
                  "onto a new stream as onto an existing one", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE",
                  'Please use either the "Append" or "Overwrite" mode instead.'):
        assert words in paragraph, f"the README no longer says {words!r}: {paragraph}"


@pytest.mark.parametrize("mode", list(REFUSED), ids=lambda mode: str(mode))
def test_errorifexists_and_ignore_onto_an_existing_stream_are_refused_naming_append(spark, cluster, request, mode):
    stream = unique_stream(request)
    save(spark, cluster, stream, "append")
    before = ledger_count(cluster)
    refused_on_the_driver(lambda: save(spark, cluster, stream, mode, rows=7), REFUSED[mode])
    assert ledger_count(cluster) == before, "a ledger was created"
    assert row_count(spark, cluster, stream) == 5, "the stream changed"
    save(spark, cluster, stream, "append", rows=7)  # the mode the message names works
    assert row_count(spark, cluster, stream) == 12


@pytest.mark.parametrize("mode", [None, "ignore"], ids=lambda mode: str(mode))
def test_onto_a_new_stream_spark_refuses_them_too_and_nothing_is_created(spark, cluster, request, mode):
    stream = unique_stream(request)
    before = ledger_count(cluster)
    refused_on_the_driver(lambda: save(spark, cluster, stream, mode), REFUSED[mode])
    assert stream not in streams(cluster) and ledger_count(cluster) == before, "something was created"
    save(spark, cluster, stream, "append")  # a new stream: append creates it
    assert row_count(spark, cluster, stream) == 5
    save(spark, cluster, stream, "overwrite", rows=3)
    assert row_count(spark, cluster, stream) == 3
