"""The Arrow schema a stream stores, Spark schemas, and batches conformed to them.

A stream stores one Arrow schema: the Spark schema of its first write, in the
Arrow types Spark itself uses (``string`` not ``large_string``, timestamps as
microseconds in UTC, lists of ``element``, maps of non-null ``key`` and
``value``) and with every field nullable, as Spark's file sources do, so that
writes of the same columns from any DataFrame fit it.

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
from typing import Any, Callable

import pyarrow as pa

from pyspark_ledger.errors import InvalidConfigurationError, MetadataError

STORED_TIMEZONE = "UTC"
MAX_DECIMAL_PRECISION = 38
PARTITION_COLUMN, LEDGER_ID_COLUMN, ENTRY_ID_COLUMN = "_partition", "_ledger_id", "_entry_id"
METADATA_FIELDS = (pa.field(PARTITION_COLUMN, pa.int32(), nullable=False),
                   pa.field(LEDGER_ID_COLUMN, pa.int64(), nullable=False),
                   pa.field(ENTRY_ID_COLUMN, pa.int64(), nullable=False))
_T = pa.types
_SPARK_TAGS = (b"variant", b"geometry", b"geography")
_SAME = (_T.is_boolean, _T.is_signed_integer, _T.is_float32, _T.is_float64, _T.is_null)
_STRINGS = (_T.is_string, _T.is_large_string, _T.is_string_view)
_BINARIES = (_T.is_binary, _T.is_large_binary, _T.is_binary_view, _T.is_fixed_size_binary)
_LISTS = (_T.is_list, _T.is_large_list, _T.is_fixed_size_list, _T.is_list_view, _T.is_large_list_view)


# --- Arrow normalisation (pure pyarrow) -----------------------------------------------


def normalize_arrow_schema(schema: pa.Schema, *, as_nullable: bool = False) -> pa.Schema:
    """``schema`` in the Arrow types Spark uses; every field nullable if ``as_nullable``.

    InvalidConfigurationError names a field whose type Spark cannot represent.
    """
    return pa.schema([_normalize_field(field, field.name, as_nullable) for field in schema])


def stored_schema(schema: pa.Schema) -> pa.Schema:
    """The form a stream stores: Spark's types, every field nullable."""
    return normalize_arrow_schema(schema, as_nullable=True)


def _normalize_field(field: pa.Field, path: str, as_nullable: bool) -> pa.Field:
    nullable = True if as_nullable else field.nullable
    return pa.field(field.name, _normalize_type(field.type, path, as_nullable), nullable=nullable)


def _normalize_type(arrow_type: pa.DataType, path: str, as_nullable: bool) -> pa.DataType:
    for is_kind, convert in _CONVERSIONS:
        if is_kind(arrow_type):
            return convert(arrow_type, path, as_nullable)
    raise _unsupported(arrow_type, path, "Spark has no equivalent type")


def _decimal(arrow_type, path, _as_nullable) -> pa.DataType:
    if arrow_type.precision > MAX_DECIMAL_PRECISION:
        raise _unsupported(arrow_type, path, f"Spark decimals have at most {MAX_DECIMAL_PRECISION} digits")
    return pa.decimal128(arrow_type.precision, arrow_type.scale)


def _timestamp(arrow_type, _path, _as_nullable) -> pa.DataType:
    return pa.timestamp("us", tz=STORED_TIMEZONE if arrow_type.tz else None)


def _list(arrow_type, path, as_nullable) -> pa.DataType:
    element = _normalize_field(arrow_type.value_field, f"{path}[]", as_nullable)
    return pa.list_(element.with_name("element"))


def _map(arrow_type, path, as_nullable) -> pa.DataType:
    key = _normalize_type(arrow_type.key_type, f"{path}.key", as_nullable)
    value = _normalize_field(arrow_type.item_field, f"{path}.value", as_nullable)
    return pa.map_(pa.field("key", key, nullable=False), value.with_name("value"))


def _struct(arrow_type, path, as_nullable) -> pa.DataType:
    return pa.struct([_normalize_field(child, f"{path}.{child.name}", as_nullable)
                      for child in arrow_type])


def _dictionary(arrow_type, path, as_nullable) -> pa.DataType:
    return _normalize_type(arrow_type.value_type, path, as_nullable)


def _unsigned(arrow_type, path, _as_nullable) -> pa.DataType:
    raise _unsupported(arrow_type, path, "Spark has no unsigned integers; cast to a wider signed type")


def _fixed(result: pa.DataType) -> Callable[..., pa.DataType]:
    return lambda *_: result


_CONVERSIONS: tuple[tuple[Callable[[pa.DataType], bool], Callable[..., pa.DataType]], ...] = (
    *((is_kind, lambda arrow_type, *_: arrow_type) for is_kind in _SAME),
    (_T.is_unsigned_integer, _unsigned),
    (_T.is_decimal, _decimal),
    *((is_kind, _fixed(pa.string())) for is_kind in _STRINGS),
    *((is_kind, _fixed(pa.binary())) for is_kind in _BINARIES),
    (_T.is_date, _fixed(pa.date32())),
    (_T.is_timestamp, _timestamp),
    (_T.is_duration, _fixed(pa.duration("us"))),
    (_T.is_time, _fixed(pa.time64("ns"))),
    *((is_kind, _list) for is_kind in _LISTS),
    (_T.is_map, _map),
    (_T.is_struct, _struct),
    (_T.is_dictionary, _dictionary),
)


def _unsupported(arrow_type: pa.DataType, path: str, why: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"field {path!r} has Arrow type {arrow_type}, which a ledger "
                                     f"stream cannot hold for Spark: {why}")


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
        raise InvalidConfigurationError(
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
        raise InvalidConfigurationError(f"a batch cannot be converted to the schema {schema}: {exc}") from exc


def _check_no_nulls(batch: pa.RecordBatch, schema: pa.Schema) -> None:
    for column, field in zip(batch.columns, schema):
        if not field.nullable and column.null_count:
            raise InvalidConfigurationError(
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
        raise InvalidConfigurationError(
            f"cannot write to {target}: its schema differs from the data's: " + "; ".join(problems)
            + ". Select and cast the columns to the stream's schema, or write to a new stream")


# --- the stored form ------------------------------------------------------------------------


def encode_stream_schema(schema: pa.Schema) -> bytes:
    """The stored schema as Arrow IPC schema bytes (for the stream's metadata)."""
    return stored_schema(schema).serialize().to_pybytes()


def decode_stream_schema(data: bytes) -> pa.Schema:
    """The schema ``encode_stream_schema`` stored; MetadataError if unreadable."""
    try:
        return pa.ipc.read_schema(pa.py_buffer(data))
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise MetadataError(f"the stream's stored schema is unreadable ({len(data)} bytes): {exc}") from exc


# --- Spark types (import pyspark) ------------------------------------------------------------


def spark_to_arrow_schema(schema: Any) -> pa.Schema:
    """A Spark schema (StructType, its JSON, or DDL with an active session) as Spark's Arrow schema."""
    from pyspark_ledger.spark.compat import spark_arrow_schema

    struct = as_struct_type(schema)
    try:
        arrow = spark_arrow_schema(struct, STORED_TIMEZONE)
    except InvalidConfigurationError:
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


def _not_storable(struct, why: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(
        f"the Spark schema {struct.simpleString()} cannot be stored in a ledger stream: {why}")


def arrow_to_spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema (timestamps without zone become TIMESTAMP_NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(normalize_arrow_schema(schema), prefer_timestamp_ntz=True)
    except InvalidConfigurationError:
        raise
    except Exception as exc:
        raise InvalidConfigurationError(f"the Arrow schema {schema} has no Spark equivalent: {exc}") from exc


def read_spark_schema(stored: pa.Schema, *, include_metadata: bool = False):
    """The StructType a reader declares to Spark (``DataSource.schema()``)."""
    return arrow_to_spark_schema(read_arrow_schema(stored, include_metadata=include_metadata))


def as_struct_type(schema: Any):
    """A StructType from a StructType, its JSON text, or a DDL string (needs an active session)."""
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str):
        raise InvalidConfigurationError(
            f"a Spark schema must be a StructType, its JSON or a DDL string, got {type(schema).__name__}")
    if schema.lstrip().startswith("{"):
        return _struct_from_json(schema)
    return _struct_from_ddl(schema)


def _struct_from_json(text: str):
    from pyspark.sql.types import StructType

    try:
        return StructType.fromJson(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidConfigurationError(f"not a Spark schema in JSON form ({exc}): {text[:200]!r}") from exc


def _struct_from_ddl(ddl: str):
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType, _parse_datatype_string

    if SparkSession.getActiveSession() is None:
        raise InvalidConfigurationError(
            f"parsing the DDL schema {ddl!r} needs an active SparkSession; pass a StructType "
            "or its JSON (schema.json()) instead")
    try:
        parsed = _parse_datatype_string(ddl)
    except Exception as exc:  # Spark's ParseException
        raise InvalidConfigurationError(f"the DDL schema {ddl!r} does not parse: {exc}") from exc
    if not isinstance(parsed, StructType):
        raise InvalidConfigurationError(f"the DDL schema {ddl!r} is a {parsed.simpleString()}, not columns")
    return parsed
