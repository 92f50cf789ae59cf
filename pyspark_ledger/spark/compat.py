"""What the running Spark offers the ``ledger`` source: feature checks, fallbacks and clear errors.

The source is built on Spark 4.3 and also runs on 4.0 and 4.1 (tested with
pyspark 4.0.5, 4.1.4 and 4.3.0), where part of the Python Data Source API is
missing:

- ``pyspark.sql.pandas.types.to_arrow_schema`` takes ``timezone=`` from 4.2 on;
  4.0/4.1 take ``timestamp_utc=True``, which gives the same UTC timestamps
  (``spark_arrow_schema``);
- admission control and Trigger.AvailableNow for Python stream readers
  (``pyspark.sql.streaming.datasource``: ``latestOffset(start, limit)``,
  ``ReadLimit``, ``SupportsTriggerAvailableNow``) exist from 4.2 on. Older
  Sparks get the reader that reads every confirmed entry at each micro-batch
  (``latestOffset()``); asking them for maxEntriesPerTrigger or
  maxBytesPerTrigger fails on the driver naming Spark 4.2
  (``reader_choice.stream_reader_class``). Trigger.AvailableNow still works there: Spark
  pins the end of the first ``latestOffset()`` itself;
- ``DataSourceStreamArrowWriter`` exists from 4.1 on. Spark 4.0's write worker
  hands Arrow batches to every writer that is a ``DataSourceArrowWriter``,
  streaming ones included, so the stream writer's base there is both a
  ``DataSourceStreamWriter`` and a ``DataSourceArrowWriter``
  (``stream_arrow_writer_base``); its batches are checked to be Arrow.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyspark
from pyspark.sql import datasource as spark_datasource

from pyspark_ledger.errors import InternalError, InvalidConfigurationError

ADMISSION_CONTROL_SINCE = "4.2"
STREAM_ARROW_WRITER_SINCE = "4.1"


def spark_version() -> str:
    """The version of the pyspark this process imported."""
    return pyspark.__version__


def has_admission_control() -> bool:
    """True if Spark asks Python stream readers for ``latestOffset(start, limit)`` (Spark 4.2+)."""
    try:
        import pyspark.sql.streaming.datasource  # noqa: F401
    except ImportError:
        return False
    return True


# --- schemas ------------------------------------------------------------------------------------


def spark_arrow_schema(struct: Any, timezone: str,
                       to_arrow_schema: Callable[..., pa.Schema] | None = None) -> pa.Schema:
    """Spark's Arrow schema of ``struct``, timestamps in ``timezone`` ("UTC"), on any Spark 4.x."""
    if to_arrow_schema is None:
        from pyspark.sql.pandas.types import to_arrow_schema
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(struct, timezone=timezone)
    if timezone != "UTC":
        raise InvalidConfigurationError(
            f"Spark {spark_version()} stores timestamps in UTC only, not {timezone!r}: use Spark 4.2 or later")
    return to_arrow_schema(struct, timestamp_utc=True)  # Spark 4.0/4.1


# --- stream writers -----------------------------------------------------------------------------


class StreamArrowWriterFallback(spark_datasource.DataSourceStreamWriter, spark_datasource.DataSourceArrowWriter):
    """A stream writer that Spark 4.0 feeds with Arrow batches: its write worker passes them to
    every ``DataSourceArrowWriter``, streaming or not (4.0.5's ``write_into_data_source``)."""


def stream_arrow_writer_base(module: Any = spark_datasource) -> type:
    """The base class of a stream writer fed Arrow batches: ``DataSourceStreamArrowWriter``
    where ``module`` (``pyspark.sql.datasource``) has it (Spark 4.1+), else the fallback."""
    return getattr(module, "DataSourceStreamArrowWriter", None) or StreamArrowWriterFallback


def arrow_batches(items: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    """``items`` unchanged, failing clearly if Spark handed a writer Rows instead of Arrow batches."""
    for item in items:
        if not isinstance(item, pa.RecordBatch):
            raise InternalError(
                f"Spark {spark_version()} handed the ledger stream writer a {type(item).__name__}, not an Arrow "
                f"record batch: streaming writes need a Spark that feeds stream writers Arrow batches "
                f"(4.0, or {STREAM_ARROW_WRITER_SINCE} and later with DataSourceStreamArrowWriter)")
        yield item
