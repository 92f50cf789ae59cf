"""Validation and encoding shared by the backends: keys, ids, bookie info.

Both backends accept exactly the same names, so a key that works on SQLite
also works on ZooKeeper (where each key segment becomes a znode name).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from pyspark_ledger.errors import InvalidArgumentError, MetadataError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import BookieRegistration

MAX_LEDGER_ID = 2**63 - 1  # ledger ids are non-negative signed 64-bit, like BookKeeper's
MAX_VALUE_BYTES = 1_000_000  # below ZooKeeper's default 1 MiB packet limit (jute.maxbuffer)


def check_ledger_id(ledger_id: object) -> int:
    """The id itself, or InvalidArgumentError if it is not in 0..2**63-1."""
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int) \
            or not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise InvalidArgumentError(
            f"ledger id must be an integer in 0..{MAX_LEDGER_ID}, got {ledger_id!r}")
    return ledger_id


def check_version(version: object, what: str = "expected_version") -> int:
    """A stored-value version: an integer >= 0."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidArgumentError(f"{what} must be an integer >= 0, got {version!r}")
    return version


def check_key(key: object, *, allow_root: bool = False) -> str:
    """A '/'-separated relative key such as ``streams/orders/partition-0``."""
    if allow_root and key == "":
        return ""
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"metadata key must be a non-empty string, got {key!r}")
    for segment in key.split("/"):
        _check_segment(segment, f"metadata key {key!r}")
    return key


def check_bookie_id(bookie_id: object) -> str:
    """A bookie id such as ``127.0.0.1:3181``: one segment, no '/'."""
    if not isinstance(bookie_id, str) or not bookie_id:
        raise InvalidArgumentError(f"bookie id must be a non-empty string, got {bookie_id!r}")
    _check_segment(bookie_id, f"bookie id {bookie_id!r}")
    return bookie_id


def check_value(value: object, key: str) -> bytes:
    """The value as bytes; InvalidArgumentError if not bytes or too large."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(
            f"value of metadata key {key!r} must be bytes, got {type(value).__name__}")
    return check_size(bytes(value), f"value of metadata key {key!r}")


def check_size(data: bytes, what: str) -> bytes:
    """Refuse values ZooKeeper could not store, on every backend alike."""
    if len(data) > MAX_VALUE_BYTES:
        raise InvalidArgumentError(
            f"{what} is {len(data)} bytes; the limit is {MAX_VALUE_BYTES} (ZooKeeper's znode "
            "size): store large data elsewhere and keep a reference here")
    return data


def parent_keys(key: str) -> list[str]:
    """The ancestors of ``key``, outermost first: ``a/b/c`` -> ``[a, a/b]``."""
    segments = key.split("/")
    return ["/".join(segments[:index]) for index in range(1, len(segments))]


def encode_ledger(metadata: LedgerMetadata) -> bytes:
    """``metadata.to_json()``, checked against the size limit."""
    return check_size(metadata.to_json(), f"metadata of ledger {metadata.ledger_id}")


def encode_bookie_info(bookie_id: str, info: Mapping[str, Any] | None) -> bytes:
    """The JSON stored for a registration; InvalidArgumentError if not JSON-able."""
    try:
        data = json.dumps(dict(info or {}), sort_keys=True, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"info of bookie {bookie_id!r} must be a JSON-serializable mapping: {exc}") from exc
    return check_size(data, f"info of bookie {bookie_id!r}")


def decode_bookie(bookie_id: str, data: bytes | None, read_only: bool) -> BookieRegistration:
    """A BookieRegistration from its stored JSON info."""
    try:
        info = json.loads(data) if data else {}
    except ValueError as exc:
        raise MetadataError(f"unreadable registration info of bookie {bookie_id!r}: {exc}") from exc
    if not isinstance(info, dict):
        raise MetadataError(f"registration info of bookie {bookie_id!r} is not a JSON object")
    return BookieRegistration(bookie_id=bookie_id, read_only=read_only, info=info)


def _check_segment(segment: str, what: str) -> None:
    if segment in ("", ".", ".."):
        raise InvalidArgumentError(
            f"{what} has an empty, '.' or '..' segment; use names like 'streams/orders'")
    if any(ord(char) < 0x20 or char == "\x7f" for char in segment) or segment != segment.strip():
        raise InvalidArgumentError(
            f"{what} contains control characters or surrounding whitespace")
    if "/" in segment:
        raise InvalidArgumentError(f"{what} must not contain '/'")
