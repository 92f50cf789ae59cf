"""Stored stream schemas, Spark <-> Arrow, conformed batches, compatibility checks."""
from __future__ import annotations

import datetime as dt
import decimal

import pytest

pa = pytest.importorskip("pyarrow")  # the connector's extra: pip install 'pyspark-ledger[spark]'

from pyspark_ledger.errors import (InvalidArgumentError, InvalidConfigurationError, InvalidStateError,  # noqa: E402
                                   MetadataError)
from pyspark_ledger.log import stream_schema as ss  # noqa: E402
from pyspark_ledger.spark import schema as sc  # noqa: E402

# A schema as writers may produce it: large types, other units and zones, odd list field names.
RAW = pa.schema([
    pa.field("i8", pa.int8(), nullable=False), pa.field("i16", pa.int16()), pa.field("i32", pa.int32()),
    pa.field("i64", pa.int64(), nullable=False), pa.field("f32", pa.float32()), pa.field("f64", pa.float64()),
    pa.field("flag", pa.bool_()), pa.field("name", pa.large_string(), nullable=False),
    pa.field("view", pa.string_view()), pa.field("blob", pa.large_binary()),
    pa.field("fixed", pa.binary(4)), pa.field("day", pa.date64()),
    pa.field("ts", pa.timestamp("ns", tz="America/New_York")), pa.field("ts_ntz", pa.timestamp("ms")),
    pa.field("price", pa.decimal128(12, 2)), pa.field("wide", pa.decimal256(38, 10)),
    pa.field("nothing", pa.null()),
    pa.field("tags", pa.large_list(pa.field("item", pa.large_string(), nullable=False))),
    pa.field("fixed_list", pa.list_(pa.int16(), 2)),
    pa.field("attrs", pa.map_(pa.large_string(), pa.float64())),
    pa.field("who", pa.struct([pa.field("id", pa.int64(), nullable=False),
                               pa.field("addr", pa.struct([pa.field("city", pa.large_string())]))])),
    pa.field("kind", pa.dictionary(pa.int8(), pa.string())),
    pa.field("wait", pa.duration("ms")),
])


def spark_types():
    return pytest.importorskip("pyspark.sql.types")


# --- normalisation ------------------------------------------------------------------------


def test_normalized_types_are_sparks():
    normal = ss.normalize_arrow_schema(RAW)
    expect = {"name": pa.string(), "view": pa.string(), "blob": pa.binary(), "fixed": pa.binary(),
              "day": pa.date32(), "ts": pa.timestamp("us", tz="UTC"), "ts_ntz": pa.timestamp("us"),
              "price": pa.decimal128(12, 2), "wide": pa.decimal128(38, 10), "kind": pa.string(),
              "wait": pa.duration("us"), "nothing": pa.null(), "i8": pa.int8(), "f32": pa.float32()}
    for name, arrow_type in expect.items():
        assert normal.field(name).type == arrow_type, name
    tags = normal.field("tags").type
    assert tags == pa.list_(pa.field("element", pa.string(), nullable=False))
    assert tags.value_field.name == "element" and not tags.value_field.nullable
    assert normal.field("fixed_list").type == pa.list_(pa.int16())
    attrs = normal.field("attrs").type
    assert (attrs.key_field.name, attrs.key_field.nullable, attrs.item_field.name) == ("key", False, "value")
    assert normal.field("who").type.field("addr").type == pa.struct([pa.field("city", pa.string())])


def test_normalisation_keeps_nullability_and_order_unless_asked():
    normal = ss.normalize_arrow_schema(RAW)
    assert normal.names == RAW.names
    assert [field.nullable for field in normal] == [field.nullable for field in RAW]
    assert not normal.field("who").type.field("id").nullable


def test_stored_schema_is_nullable_at_every_level():
    stored = ss.stored_schema(RAW)
    assert all(field.nullable for field in stored)
    assert stored.field("tags").type.value_field.nullable
    assert stored.field("who").type.field("id").nullable
    assert not stored.field("attrs").type.key_field.nullable  # map keys never are
    assert ss.stored_schema(stored).equals(stored)  # idempotent


def test_normalisation_agrees_with_sparks_own_arrow_conversion():
    pandas_types = pytest.importorskip("pyspark.sql.pandas.types")
    normal = ss.normalize_arrow_schema(RAW)
    spark_schema = pandas_types.from_arrow_schema(normal, prefer_timestamp_ntz=True)
    assert pandas_types.to_arrow_schema(spark_schema, timezone="UTC").equals(normal)


@pytest.mark.parametrize("arrow_type, fragment", [
    (pa.uint8(), "no unsigned integers"), (pa.uint64(), "no unsigned integers"),
    (pa.float16(), "no equivalent"), (pa.decimal256(40, 2), "at most 38 digits"),
    (pa.month_day_nano_interval(), "no equivalent"),
    (pa.list_(pa.uint16()), "'col[]'"), (pa.struct([pa.field("x", pa.uint32())]), "'col.x'"),
    (pa.map_(pa.string(), pa.uint8()), "'col.value'"),
])
def test_types_spark_cannot_hold_are_refused_naming_the_field(arrow_type, fragment):
    with pytest.raises(InvalidArgumentError, match="which a ledger stream cannot hold") as caught:
        ss.stored_schema(pa.schema([pa.field("col", arrow_type)]))
    assert fragment in str(caught.value)


# --- Spark types --------------------------------------------------------------------------


def test_spark_struct_to_arrow_and_back():
    types = spark_types()
    struct = types.StructType([
        types.StructField("id", types.LongType(), False),
        types.StructField("ts", types.TimestampType()),
        types.StructField("ntz", types.TimestampNTZType()),
        types.StructField("amount", types.DecimalType(20, 4)),
        types.StructField("tags", types.ArrayType(types.StringType(), containsNull=False)),
        types.StructField("props", types.MapType(types.StringType(), types.IntegerType())),
        types.StructField("inner", types.StructType([types.StructField("b", types.BinaryType())])),
    ])
    arrow = sc.spark_to_arrow_schema(struct)
    assert arrow.field("ts").type == pa.timestamp("us", tz="UTC")
    assert arrow.field("ntz").type == pa.timestamp("us")
    assert not arrow.field("id").nullable
    assert sc.arrow_to_spark_schema(arrow) == struct
    assert sc.spark_to_arrow_schema(struct.json()).equals(arrow)
    as_stored = sc.arrow_to_spark_schema(ss.stored_schema(arrow))
    assert all(field.nullable for field in as_stored.fields)
    assert as_stored["tags"].dataType == types.ArrayType(types.StringType(), containsNull=True)
    assert [f.dataType.simpleString() for f in as_stored.fields] == [
        f.dataType.simpleString() for f in struct.fields]


def test_read_schema_appends_the_metadata_columns():
    types = spark_types()
    stored = ss.stored_schema(pa.schema([pa.field("v", pa.string())]))
    assert sc.read_arrow_schema(stored) is stored
    with_meta = sc.read_arrow_schema(stored, include_metadata=True)
    assert with_meta.names == ["v", "_partition", "_ledger_id", "_entry_id"]
    assert [f.type for f in with_meta][1:] == [pa.int32(), pa.int64(), pa.int64()]
    assert not any(f.nullable for f in list(with_meta)[1:])
    spark_schema = sc.read_spark_schema(stored, include_metadata=True)
    assert [(f.name, f.dataType, f.nullable) for f in spark_schema.fields][1:] == [
        ("_partition", types.IntegerType(), False), ("_ledger_id", types.LongType(), False),
        ("_entry_id", types.LongType(), False)]


def test_metadata_columns_cannot_shadow_stream_columns():
    stored = pa.schema([pa.field("_entry_id", pa.int64()), pa.field("v", pa.string())])
    with pytest.raises(InvalidConfigurationError, match=r"includeMetadata=true .*already has \['_entry_id'\]"):
        sc.read_arrow_schema(stored, include_metadata=True)


def test_as_struct_type_refuses_bad_input_without_a_session():
    spark_types()
    with pytest.raises(InvalidArgumentError, match="StructType, its JSON or a DDL string"):
        sc.as_struct_type(42)
    with pytest.raises(InvalidArgumentError, match="not a Spark schema in JSON form"):
        sc.as_struct_type('{"type": "struct", "fields": [{"name": "a"}]}')


def test_ddl_without_an_active_session_is_a_state_error(monkeypatch):
    spark_types()
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    with pytest.raises(InvalidStateError, match="needs an active SparkSession"):
        sc.as_struct_type("id int")


def test_unsupported_spark_types_are_refused():
    types = spark_types()
    variant = types.StructType([types.StructField("v", types.VariantType())])
    with pytest.raises(InvalidArgumentError, match="variant values are not supported"):
        sc.spark_to_arrow_schema(variant)
    nested = types.StructType([types.StructField("a", types.ArrayType(types.StructType(
        [types.StructField("v", types.VariantType())])))])
    with pytest.raises(InvalidArgumentError, match="variant values are not supported"):
        sc.spark_to_arrow_schema(nested)
    with pytest.raises(InvalidArgumentError, match="cannot be stored"):
        sc.spark_to_arrow_schema(types.StructType([types.StructField("c", types.CalendarIntervalType())]))


# --- batches --------------------------------------------------------------------------------


def raw_batch(rows: int = 3) -> pa.RecordBatch:
    ny = dt.timezone(dt.timedelta(hours=-5))
    data = {
        "i8": [1, 2, 3], "i16": [None, 2, 3], "i32": [1, None, 3], "i64": [10, 20, 30],
        "f32": [0.5, None, 1.5], "f64": [1.25, 2.5, None], "flag": [True, None, False],
        "name": ["a", "b", "c"], "view": ["x", None, "z"], "blob": [b"\x00", None, b"\xff"],
        "fixed": [b"abcd", b"efgh", None], "day": [dt.date(2024, 1, 1), None, dt.date(1970, 1, 2)],
        "ts": [dt.datetime(2024, 3, 10, 1, 30, tzinfo=ny), None, dt.datetime(1999, 12, 31, 23, 59, tzinfo=ny)],
        "ts_ntz": [dt.datetime(2024, 1, 1, 12), None, dt.datetime(2000, 2, 29)],
        "price": [decimal.Decimal("12.34"), None, decimal.Decimal("-0.01")],
        "wide": [decimal.Decimal("1.0000000001"), None, decimal.Decimal("0")],
        "nothing": [None, None, None], "tags": [["a", "b"], [], None], "fixed_list": [[1, 2], None, [3, 4]],
        "attrs": [[("k", 1.0)], None, []], "who": [{"id": 1, "addr": {"city": "Oslo"}}, None,
                                                  {"id": 3, "addr": None}],
        "kind": ["red", "blue", "red"], "wait": [dt.timedelta(seconds=1), None, dt.timedelta(0)],
    }
    arrays = [pa.array(data[field.name], type=field.type) for field in RAW]
    return pa.RecordBatch.from_arrays(arrays, schema=RAW).slice(0, rows)


def test_conform_batch_casts_to_the_stored_schema_keeping_values():
    batch = raw_batch()
    stored = ss.stored_schema(RAW)
    conformed = sc.conform_batch(batch, stored)
    assert conformed.schema.equals(stored)
    assert conformed.column("ts").to_pylist()[0] == dt.datetime(2024, 3, 10, 6, 30, tzinfo=dt.timezone.utc)
    assert conformed.column("name").to_pylist() == ["a", "b", "c"]
    assert conformed.column("who").to_pylist()[0] == {"id": 1, "addr": {"city": "Oslo"}}
    assert conformed.column("kind").to_pylist() == ["red", "blue", "red"]
    assert conformed.column("wide").to_pylist()[0] == decimal.Decimal("1.0000000001")


def test_conform_batch_is_free_when_schemas_match_and_reorders_by_name():
    stored = ss.stored_schema(RAW)
    conformed = sc.conform_batch(raw_batch(), stored)
    assert sc.conform_batch(conformed, stored) is conformed
    reversed_batch = conformed.select(list(reversed(stored.names)))
    again = sc.conform_batch(reversed_batch, stored)
    assert again.schema.equals(stored) and again.equals(conformed)
    assert again.column("i64").buffers()[1].address == conformed.column("i64").buffers()[1].address


def test_conform_batch_refuses_other_columns_and_nulls_in_not_null_fields():
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False)])
    with pytest.raises(InvalidArgumentError, match=r"columns \['b'\] does not fit .* \['a'\]"):
        sc.conform_batch(pa.record_batch({"b": [1]}), schema)
    with pytest.raises(InvalidArgumentError, match="'a' holds 1 null"):
        sc.conform_batch(pa.record_batch({"a": [1, None]}), schema)
    with pytest.raises(InvalidArgumentError, match="cannot be converted"):
        sc.conform_batch(pa.record_batch({"a": ["x"]}), schema)


def test_add_metadata_columns():
    stored = ss.stored_schema(RAW)
    batch = sc.add_metadata_columns(sc.conform_batch(raw_batch(), stored), 2, 123456789012, 17)
    assert batch.schema.equals(sc.read_arrow_schema(stored, include_metadata=True))
    assert batch.column("_partition").to_pylist() == [2, 2, 2]
    assert batch.column("_ledger_id").to_pylist() == [123456789012] * 3
    assert batch.column("_entry_id").to_pylist() == [17] * 3
    empty = sc.add_metadata_columns(sc.conform_batch(raw_batch(0), stored), 0, 1, 2)
    assert empty.num_rows == 0 and empty.num_columns == len(stored) + 3


# --- compatibility ---------------------------------------------------------------------------


def test_compatible_schemas_ignore_order_nullability_zone_and_width():
    stored = ss.stored_schema(RAW)
    incoming = pa.schema(list(reversed(list(ss.normalize_arrow_schema(RAW)))))
    sc.check_compatible(stored, incoming)
    sc.check_compatible(stored, RAW)


def test_incompatible_schemas_list_every_difference():
    stored = ss.stored_schema(pa.schema([("id", pa.int64()), ("name", pa.string()), ("gone", pa.float64()),
                                         ("who", pa.struct([("a", pa.int32())]))]))
    incoming = pa.schema([("id", pa.int32()), ("name", pa.large_string()), ("extra", pa.bool_()),
                          ("who", pa.struct([("a", pa.int32()), ("b", pa.int32())]))])
    with pytest.raises(InvalidArgumentError) as caught:
        sc.check_compatible(stored, incoming, stream="orders")
    message = str(caught.value)
    assert "cannot write to stream 'orders'" in message
    assert "the data lacks field 'gone' (double)" in message
    assert "the stream has no field 'extra' (bool)" in message
    assert "field 'id': the stream has int64, the data has int32" in message
    assert "field 'who': the stream has struct<a: int32>, the data has struct<a: int32, b: int32>" in message
    assert "'name'" not in message


# --- stored form ------------------------------------------------------------------------------


def test_stream_schema_bytes_round_trip():
    data = ss.encode_stream_schema(RAW)
    assert ss.decode_stream_schema(data).equals(ss.stored_schema(RAW))


@pytest.mark.parametrize("data", [b"", b"not a schema", b"\xff" * 64], ids=["empty", "text", "ff"])
def test_unreadable_stored_schema_is_a_metadata_error(data):
    with pytest.raises(MetadataError, match="stored schema is unreadable"):
        ss.decode_stream_schema(data)
