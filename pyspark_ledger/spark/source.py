"""``DefaultSource``: the Spark data source ``format("ledger")``, a façade over the readers and writers.

Spark registers it without any ``spark.dataSource.register`` call: its lookup
imports each top-level ``pyspark_*`` module and takes its ``DefaultSource``
(``pyspark_ledger`` exposes this class lazily, so importing the package does
not import pyspark). Each method parses the options for its mode, failing on
the driver with a message naming a missing, unknown or malformed option, and
hands over to the module that does the work:

- ``schema()``: the stream's stored schema (plus ``_partition``, ``_ledger_id``,
  ``_entry_id`` with includeMetadata); a stream that does not exist, or was
  never written through Spark, fails clearly, and so does a password that is
  not the stream's (the stream keeps a check of it: ``log.stream_password``);
- ``reader()`` -> ``batch_reader.LedgerBatchReader``;
- ``streamReader()`` -> ``stream_admission.AdmissionControlledStreamReader`` (Spark 4.2+),
  ``stream_reader.LedgerStreamReader`` on older Sparks (``compat``);
- ``writer()`` / ``streamWriter()`` -> ``sink.batch_writer`` / ``sink.stream_writer``.
"""
from __future__ import annotations

from typing import Any, Mapping

from pyspark.sql.datasource import DataSource

from pyspark_ledger.errors import InvalidConfigurationError, InvalidStateError, NoSuchKeyError
from pyspark_ledger.spark.executor import stream_client
from pyspark_ledger.spark.options import ReadOptions, parse_read_options

NAME = "ledger"
STREAMING_ONLY = frozenset({"maxentriespertrigger", "maxbytespertrigger"})


class DefaultSource(DataSource):
    """``spark.read.format("ledger")`` and friends (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return stream_read_schema(schema_options(self.options))

    def reader(self, schema):
        from pyspark_ledger.spark.batch_reader import LedgerBatchReader

        return LedgerBatchReader(parse_read_options(dict(self.options)), schema)

    def streamReader(self, schema):
        from pyspark_ledger.spark.reader_choice import stream_reader_class

        options = parse_read_options(dict(self.options), streaming=True)
        return stream_reader_class(options)(options, schema)

    def writer(self, schema, overwrite: bool):
        from pyspark_ledger.spark.sink import batch_writer

        return batch_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        from pyspark_ledger.spark.sink import stream_writer

        return stream_writer(dict(self.options), schema, overwrite)


def schema_options(options: Mapping[str, Any]) -> ReadOptions:
    """The options as a batch read's, else as a streaming read's (``schema()`` serves both).

    The reader made next checks them strictly for its own mode. If neither mode
    accepts them, the complaint of the mode they look like is raised: streaming
    if a streaming-only option is given, else batch.
    """
    try:
        return parse_read_options(dict(options))
    except InvalidConfigurationError as batch_error:
        try:
            return parse_read_options(dict(options), streaming=True)
        except InvalidConfigurationError as stream_error:
            given = {str(key).strip().lower() for key in options}
            raise (stream_error if given & STREAMING_ONLY else batch_error) from None


def stream_read_schema(options: ReadOptions):
    """The Spark StructType a read of the stream produces; clear errors if there is none."""
    from pyspark_ledger.spark.schema import read_spark_schema

    client = stream_client(options.metadata_service_uri, options.password_bytes, options.tls)
    try:
        info = client.verify_password(options.stream)  # UnauthorizedError naming the option password
    except NoSuchKeyError as exc:
        raise NoSuchKeyError(
            f"stream {options.stream!r} does not exist in {options.metadata_service_uri}: check the option "
            "stream (names are case-sensitive) and metadataServiceUri, or write a DataFrame to it first "
            "with df.write.format('ledger')") from exc
    stored = info.arrow_schema()
    if stored is None:
        raise InvalidStateError(
            f"stream {options.stream!r} has no schema: it was created without one and nothing has been "
            "written to it through Spark yet. Write a DataFrame to it first, or store a schema with "
            "StreamClient.set_schema")
    return read_spark_schema(stored, include_metadata=options.include_metadata)
