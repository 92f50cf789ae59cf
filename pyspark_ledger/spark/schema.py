"""Spark schemas <-> the Arrow schema a stream stores, and batches conformed to them.

A stream stores one Arrow schema (``log.stream_schema``: Spark's Arrow types,
every field nullable, kept as Arrow IPC bytes in the stream's record); the
Spark schema of a stream's first write becomes that schema.

Spark refuses a Python data source's first Arrow batch unless its schema equals
the one Spark derives from the source's schema exactly
(DATA_SOURCE_RETURN_SCHEMA_MISMATCH), so readers build the batches they yield
with ``conform_batch`` to ``read_arrow_schema`` (the stored schema plus, with
``includeMetadata``, the non-null columns ``_partition`` int, ``_ledger_id`` long
and ``_entry_id`` long). Writers check a DataFrame against an existing stream
with ``check_compatible`` and conform each batch before encoding it.

pyspark is imported only by the functions that take or return Spark types.
"""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError, InvalidStateError, LedgerError
from pyspark_ledger.log.stream_schema import STORED_TIMEZONE, normalize_arrow_schema, stored_schema

PARTITION_COLUMN, LEDGER_ID_COLUMN, ENTRY_ID_COLUMN = "_partition", "_ledger_id", "_entry_id"
METADATA_FIELDS = (pa.field(PARTITION_COLUMN, pa.int32(), nullable=False),
                   pa.field(LEDGER_ID_COLUMN, pa.int64(), nullable=False),
                   pa.field(ENTRY_ID_COLUMN, pa.int64(), nullable=False))
_T = pa.types
_SPARK_TAGS = (b"variant", b"geometry", b"geography")


# --- the read schema and metadata columns -------------------------------------------------


def read_arrow_schema(stored: pa.Schema, *, include_metadata: bool = False) -> pa.Schema:
    """The Arrow schema of the batches a reader yields to Spark."""
    if not include_metadata:
        return stored
    taken = [field.name for field in METADATA_FIELDS if field.name in stored.names]
    if taken:
        raise InvalidConfigurationError(
            f"option includeMetadata=true adds the columns {[f.name for f in METADATA_FIELDS]}, but "
            f"the stream already has {taken}: read without includeMetadata")
    return pa.schema(list(stored) + list(METADATA_FIELDS))


def add_metadata_columns(batch: pa.RecordBatch, partition: int, ledger_id: int,
                         entry_id: int) -> pa.RecordBatch:
    """``batch`` with the constant columns _partition, _ledger_id and _entry_id appended."""
    rows = batch.num_rows
    values = (partition, ledger_id, entry_id)
    columns = [pa.repeat(pa.scalar(value, field.type), rows) for value, field in zip(values, METADATA_FIELDS)]
    schema = pa.schema(list(batch.schema) + list(METADATA_FIELDS))
    return pa.RecordBatch.from_arrays(list(batch.columns) + columns, schema=schema)


# --- conforming batches and checking writes ------------------------------------------------


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``: columns by name, types cast (no copy when equal)."""
    if batch.schema.equals(schema):
        return batch
    if sorted(batch.schema.names) != sorted(schema.names):
        raise InvalidArgumentError(
            f"a batch with columns {batch.schema.names} does not fit the schema with columns "
            f"{schema.names}")
    if batch.schema.names != schema.names:
        batch = batch.select(schema.names)
    _check_no_nulls(batch, schema)
    if all(column.type.equals(field.type) for column, field in zip(batch.columns, schema)):
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    try:
        return batch.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"a batch cannot be converted to the schema {schema}: {exc}") from exc


def _check_no_nulls(batch: pa.RecordBatch, schema: pa.Schema) -> None:
    for column, field in zip(batch.columns, schema):
        if not field.nullable and column.null_count:
            raise InvalidArgumentError(
                f"column {field.name!r} holds {column.null_count} null(s) but is declared not null")


def check_compatible(stored: pa.Schema, incoming: pa.Schema, *, stream: str = "") -> None:
    """Raise, listing every differing field, unless ``incoming`` can be written to ``stored``.

    Fields match by name, in any order; types are compared in their stored
    form (so nullability and e.g. a session time zone do not matter).
    """
    ours, theirs = stored_schema(stored), stored_schema(incoming)
    problems = [f"the data lacks field {name!r} ({ours.field(name).type})"
                for name in ours.names if name not in theirs.names]
    problems += [f"the stream has no field {name!r} ({theirs.field(name).type})"
                 for name in theirs.names if name not in ours.names]
    problems += [f"field {name!r}: the stream has {ours.field(name).type}, the data has "
                 f"{theirs.field(name).type}"
                 for name in ours.names if name in theirs.names
                 and not ours.field(name).type.equals(theirs.field(name).type)]
    if problems:
        target = f"stream {stream!r}" if stream else "the stream"
        raise InvalidArgumentError(
            f"cannot write to {target}: its schema differs from the data's: " + "; ".join(problems)
            + ". Select and cast the columns to the stream's schema, or write to a new stream")


# --- Spark types (import pyspark) ------------------------------------------------------------


def spark_to_arrow_schema(schema: Any) -> pa.Schema:
    """A Spark schema (StructType, its JSON, or DDL with an active session) as Spark's Arrow schema."""
    from pyspark_ledger.spark.compat import spark_arrow_schema

    struct = as_struct_type(schema)
    try:
        arrow = spark_arrow_schema(struct, STORED_TIMEZONE)
    except LedgerError:
        raise
    except Exception as exc:  # pyspark raises its own type errors for unsupported types
        raise _not_storable(struct, str(exc)) from exc
    tagged = sorted({tag for field in arrow for tag in _tags(field)})
    if tagged:
        raise _not_storable(struct, f"{', '.join(tagged)} values are not supported; cast them to "
                                    "string or binary first")
    return arrow


def _tags(field: pa.Field) -> set[str]:
    """Spark's markers of variant/geometry/geography structs anywhere inside ``field``."""
    found = {key.decode() for key in (field.metadata or {}) if key in _SPARK_TAGS}
    for child in child_fields(field.type):
        found |= _tags(child)
    return found


def child_fields(arrow_type: pa.DataType) -> list[pa.Field]:
    """The fields directly inside a struct, map or list type ([] for other types)."""
    if _T.is_struct(arrow_type):
        return list(arrow_type)
    if _T.is_map(arrow_type):
        return [arrow_type.key_field, arrow_type.item_field]
    if hasattr(arrow_type, "value_field"):
        return [arrow_type.value_field]
    return []


def _not_storable(struct, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"the Spark schema {struct.simpleString()} cannot be stored in a ledger stream: {why}")


def arrow_to_spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema (timestamps without zone become TIMESTAMP_NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(normalize_arrow_schema(schema), prefer_timestamp_ntz=True)
    except LedgerError:
        raise
    except Exception as exc:
        raise InvalidArgumentError(f"the Arrow schema {schema} has no Spark equivalent: {exc}") from exc


def read_spark_schema(stored: pa.Schema, *, include_metadata: bool = False):
    """The StructType a reader declares to Spark (``DataSource.schema()``)."""
    return arrow_to_spark_schema(read_arrow_schema(stored, include_metadata=include_metadata))


def as_struct_type(schema: Any):
    """A StructType from a StructType, its JSON text, or a DDL string (needs an active session)."""
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str):
        raise InvalidArgumentError(
            f"a Spark schema must be a StructType, its JSON or a DDL string, got {type(schema).__name__}")
    if schema.lstrip().startswith("{"):
        return _struct_from_json(schema)
    return _struct_from_ddl(schema)


def _struct_from_json(text: str):
    from pyspark.sql.types import StructType

    try:
        return StructType.fromJson(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError(f"not a Spark schema in JSON form ({exc}): {text[:200]!r}") from exc


def _struct_from_ddl(ddl: str):
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType, _parse_datatype_string

    if SparkSession.getActiveSession() is None:
        raise InvalidStateError(
            f"parsing the DDL schema {ddl!r} needs an active SparkSession; pass a StructType "
            "or its JSON (schema.json()) instead")
    try:
        parsed = _parse_datatype_string(ddl)
    except Exception as exc:  # Spark's ParseException
        raise InvalidArgumentError(f"the DDL schema {ddl!r} does not parse: {exc}") from exc
    if not isinstance(parsed, StructType):
        raise InvalidArgumentError(f"the DDL schema {ddl!r} is a {parsed.simpleString()}, not columns")
    return parsed
