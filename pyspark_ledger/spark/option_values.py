"""The value parsers of the Spark ``ledger`` source's options (``options``): each takes the option's name and its
raw string and returns the value, or raises ``InvalidConfigurationError`` naming the option, the bad value and what
is accepted."""
from __future__ import annotations

import re

from pyspark_ledger.entry import check_digest_type
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.log.inputs import MAX_PARTITIONS
from pyspark_ledger.metadata.uri import parse_metadata_uri
from pyspark_ledger.protocol.zone_placement import MAX_ACK_ZONES

COMPRESSIONS = ("none", "lz4", "zstd")  # of an entry's Arrow buffers (arrow_codec)
MAX_INT32 = 2**31 - 1
MAX_WRITER_ID_CHARS = 200
_STREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", re.ASCII)
_SIZE = re.compile(r"(\d+)\s*(?:([kmgt])(?:i?b)?|b)?", re.ASCII)
_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


# --- value parsers: (option name, raw string) -> value ------------------------------


def _invalid(name: str, raw: str, accepted: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"option {name}={raw!r} is invalid: expected {accepted}")


def _metadata_uri(name: str, raw: str) -> str:
    try:
        parse_metadata_uri(raw)
    except InvalidConfigurationError as exc:
        raise InvalidConfigurationError(f"option {name}={raw!r} is invalid: {exc}") from exc
    return raw.strip()


def _stream(name: str, raw: str) -> str:
    if not _STREAM_NAME.fullmatch(raw):
        raise _invalid(name, raw, "a stream name of 1-200 letters, digits, '.', '_' or '-', "
                                  "starting with a letter or digit (e.g. 'orders')")
    return raw


def _positive_int(name: str, raw: str) -> int:
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_INT32:
        raise _invalid(name, raw, f"a whole number from 1 to {MAX_INT32}")
    return int(text)


def _partitions(name: str, raw: str) -> int:
    """A stream's partition count, within the log layer's limit (checked here so the error names the option)."""
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_PARTITIONS:
        raise _invalid(name, raw, f"a whole number from 1 to {MAX_PARTITIONS}")
    return int(text)


def _ack_zones(name: str, raw: str) -> int:
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_ACK_ZONES:
        raise _invalid(name, raw, f"a whole number from 1 (no demand) to {MAX_ACK_ZONES}: the zones every ack "
                                  "quorum must span (at most ackQuorum)")
    return int(text)


def _size(name: str, raw: str) -> int:
    match = _SIZE.fullmatch(raw.strip().lower())
    value = int(match.group(1)) * _SIZE_UNITS[match.group(2) or ""] if match else 0
    if not 1 <= value <= 2**63 - 1:
        raise _invalid(name, raw, "a positive number of bytes, optionally with a binary unit: "
                                  "1048576, 512k, 64m or 1g")
    return value


#: maxPartitionBytes: from one entry-sized split to one that still leaves a 1 TiB stream 16 tasks
PARTITION_BYTES_RANGE = (2**20, 64 * 2**30)


def _partition_bytes(name: str, raw: str) -> int:
    value = _size(name, raw)
    low, high = PARTITION_BYTES_RANGE
    if not low <= value <= high:
        raise _invalid(name, raw, "a number of bytes from 1m to 64g")
    return value


def _bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise _invalid(name, raw, "true or false")
    return text == "true"


def _digest(name: str, raw: str) -> str:
    try:
        return check_digest_type(raw.strip())
    except InvalidConfigurationError as exc:
        raise _invalid(name, raw, "crc32c or hmac-sha256") from exc


def _compression(name: str, raw: str) -> str:
    if raw.strip().lower() not in COMPRESSIONS:
        raise _invalid(name, raw, ", ".join(COMPRESSIONS))
    return raw.strip().lower()


def _text(name: str, raw: str) -> str:
    return raw


def _writer_id(name: str, raw: str) -> str:
    if not 0 < len(raw) <= MAX_WRITER_ID_CHARS or not raw.isprintable() or raw != raw.strip():
        raise _invalid(name, raw, f"1-{MAX_WRITER_ID_CHARS} printable characters without surrounding "
                                  "spaces, the same each time the query restarts (e.g. 'orders-etl')")
    return raw


def _location(name: str, raw: str) -> str:
    if not raw.strip():
        raise _invalid(name, raw, "a directory path or URI")
    return raw.strip()
