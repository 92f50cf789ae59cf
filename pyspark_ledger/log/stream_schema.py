"""The Arrow schema a stream stores: normalised to the types Spark uses, encoded for its record.

A stream stores one Arrow schema: the schema of its first write, in the Arrow
types Spark itself uses (``string`` not ``large_string``, timestamps as
microseconds in UTC, lists of ``element``, maps of non-null ``key`` and
``value``) and with every field nullable, as Spark's file sources do, so that
writes of the same columns from any DataFrame fit it. ``encode_stream_schema``
gives the bytes the stream's record keeps (Arrow IPC), ``decode_stream_schema``
reads them back.

This codec belongs to the log layer (``inputs`` encodes, ``streams`` decodes);
the Spark connector (``spark.schema``) builds on it. It imports pyarrow, never
pyspark.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa

from pyspark_ledger.errors import InvalidArgumentError, MetadataError

STORED_TIMEZONE = "UTC"
MAX_DECIMAL_PRECISION = 38
_T = pa.types
_SAME = (_T.is_boolean, _T.is_signed_integer, _T.is_float32, _T.is_float64, _T.is_null)
_STRINGS = (_T.is_string, _T.is_large_string, _T.is_string_view)
_BINARIES = (_T.is_binary, _T.is_large_binary, _T.is_binary_view, _T.is_fixed_size_binary)
_LISTS = (_T.is_list, _T.is_large_list, _T.is_fixed_size_list, _T.is_list_view, _T.is_large_list_view)


# --- Arrow normalisation (pure pyarrow) -----------------------------------------------


def normalize_arrow_schema(schema: pa.Schema, *, as_nullable: bool = False) -> pa.Schema:
    """``schema`` in the Arrow types Spark uses; every field nullable if ``as_nullable``.

    InvalidArgumentError names a field whose type Spark cannot represent.
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


def _unsupported(arrow_type: pa.DataType, path: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"field {path!r} has Arrow type {arrow_type}, which a ledger "
                                     f"stream cannot hold for Spark: {why}")


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
