"""The demo's events: Arrow batches that are a pure function of the event id, and their check.

Event ``i`` is the row ``(event_id=i, ts, user, kind, payload)`` where
``user``, ``kind`` and the 100-byte ``payload`` are derived from ``i`` alone
and ``ts`` is the time its micro-batch was planned. Generation is vectorised
pyarrow (no per-row Python), so it costs the Spark job little next to writing.
Because the content follows from the id, a row read back can be checked
without keeping what was written: ``intact_column`` states the same rules a
second time, in Spark SQL, so the check runs in the JVM next to the read and
is an independent implementation of what the generator did.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_ledger.errors import InvalidArgumentError

KINDS = ("view", "click", "cart", "buy")
USERS = 10_000
PAYLOAD_BYTES = 100
_ID_DIGITS = 20
_USER_STEP = 7919  # a prime: consecutive events spread over the users
EVENT_SCHEMA = pa.schema([
    pa.field("event_id", pa.int64()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("user", pa.int32()),
    pa.field("kind", pa.string()),
    pa.field("payload", pa.string()),
])
EVENT_SCHEMA_DDL = "event_id long, ts timestamp, user int, kind string, payload string"


def event_batch(first_id: int, count: int, ts_us: int) -> pa.RecordBatch:
    """Events ``first_id .. first_id + count - 1``, all stamped ``ts_us`` (µs since the epoch, UTC)."""
    if first_id < 0 or count < 0:
        raise InvalidArgumentError(f"event ids start at 0 and counts are >= 0, got first_id={first_id}, "
                                        f"count={count}")
    ids = pa.array(np.arange(first_id, first_id + count, dtype=np.int64))
    ts = pa.repeat(pa.scalar(ts_us, type=EVENT_SCHEMA.field("ts").type), count)
    return pa.RecordBatch.from_arrays([ids, ts, users_of(ids), kinds_of(ids), payloads_of(ids)],
                                      schema=EVENT_SCHEMA)


def event_batches(first_id: int, end_id: int, ts_us: int, max_rows: int) -> Iterator[pa.RecordBatch]:
    """Events ``first_id .. end_id - 1`` in batches of at most ``max_rows`` rows."""
    for start in range(first_id, end_id, max_rows):
        yield event_batch(start, min(max_rows, end_id - start), ts_us)


def users_of(ids: pa.Array) -> pa.Array:
    return pc.cast(pc.remainder(pc.multiply(ids, _USER_STEP), USERS), pa.int32())


def kinds_of(ids: pa.Array) -> pa.Array:
    return pc.take(pa.array(KINDS, type=pa.string()), pc.remainder(ids, len(KINDS)))


def payloads_of(ids: pa.Array) -> pa.Array:
    """100 bytes per event: its id as 20 digits, five times."""
    digits = pc.utf8_lpad(pc.cast(ids, pa.string()), width=_ID_DIGITS, padding="0")
    return pc.cast(pc.binary_repeat(digits, PAYLOAD_BYTES // _ID_DIGITS), pa.string())


def intact_column():
    """A Spark Column, computed in the JVM: True if the row's ``user``, ``kind`` and ``payload`` are what
    its ``event_id`` was generated with (the same rules as above, written in Spark SQL) and ``ts`` is set."""
    from pyspark.sql import functions as F

    event_id = F.col("event_id")
    user = F.pmod(event_id * _USER_STEP, F.lit(USERS)).cast("int")
    kind = F.element_at(F.array(*[F.lit(kind) for kind in KINDS]),
                        (F.pmod(event_id, F.lit(len(KINDS))) + 1).cast("int"))
    payload = F.repeat(F.lpad(event_id.cast("string"), _ID_DIGITS, "0"), PAYLOAD_BYTES // _ID_DIGITS)
    same = ((F.col("user") == user) & (F.col("kind") == kind) & (F.col("payload") == payload)
            & event_id.isNotNull() & F.col("ts").isNotNull())
    return F.coalesce(same, F.lit(False))
