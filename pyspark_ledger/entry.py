"""The entry format shared by client and bookie, and the keys derived from a password.

An encoded entry is a fixed 36-byte header, a digest, then the payload::

    0  magic b"LE" | version (1) | digest type (1)
    4  ledger id      u64 big-endian
    12 entry id       i64
    20 last add confirmed (LAC) when the entry was written, i64
    28 cumulative length of the ledger including this entry, u64
    36 digest: CRC32C (4 bytes) or HMAC-SHA256 (32 bytes) over header + payload
    .. payload

The bookie only peeks at the header (``peek_header``) and stores the rest as
opaque bytes; the client verifies every entry it reads (``EntryCodec.decode``).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import struct
from dataclasses import dataclass

from pyspark_ledger.errors import CorruptEntryError, InvalidConfigurationError, UnauthorizedError

MAGIC = b"LE"
VERSION = 1
_HEADER = struct.Struct(">2sBBQqqQ")
HEADER_SIZE = _HEADER.size  # 36
# The largest entry id of a ledger (ids are int64 on the wire). Bookies refuse larger ones at the request edge
# and writers stop before it: a ledger that long holds at least 2^39 × 40 bytes = 20 TiB on its bookies.
MAX_ENTRY_ID = 2**39 - 1
CHECK_PREFIX = "sha256"  # of the salted checks of secrets kept in ledger metadata

DIGEST_CRC32C = "crc32c"
DIGEST_HMAC_SHA256 = "hmac-sha256"
_DIGEST_CODES = {DIGEST_CRC32C: 1, DIGEST_HMAC_SHA256: 2}
_DIGEST_NAMES = {code: name for name, code in _DIGEST_CODES.items()}
_DIGEST_SIZES = {DIGEST_CRC32C: 4, DIGEST_HMAC_SHA256: 32}
DIGEST_TYPES = tuple(_DIGEST_CODES)


@dataclass(frozen=True, slots=True)
class EntryHeader:
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    digest_type: str


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    payload: bytes | memoryview  # a read-only view into the encoded entry when decoded with copy=False


def check_digest_type(digest_type: str) -> str:
    """Return the canonical digest name, or raise naming the accepted ones."""
    name = str(digest_type).lower().replace("_", "-")
    if name in ("hmac", "mac"):
        name = DIGEST_HMAC_SHA256
    if name not in _DIGEST_CODES:
        raise InvalidConfigurationError(
            f"unknown digest type {digest_type!r}: use one of {', '.join(DIGEST_TYPES)}"
        )
    return name


def peek_header(body: bytes) -> EntryHeader:
    """Parse the fixed header of an encoded entry without checking its digest."""
    if len(body) < HEADER_SIZE:
        raise CorruptEntryError(f"entry of {len(body)} bytes is shorter than its {HEADER_SIZE}-byte header")
    magic, version, code, ledger_id, entry_id, lac, length = _HEADER.unpack_from(body)
    if magic != MAGIC or version != VERSION or code not in _DIGEST_NAMES:
        raise CorruptEntryError("entry header has a wrong magic, version or digest type")
    digest_type = _DIGEST_NAMES[code]
    if len(body) < HEADER_SIZE + _DIGEST_SIZES[digest_type]:
        raise CorruptEntryError("entry is shorter than its header and digest")
    return EntryHeader(ledger_id, entry_id, lac, length, digest_type)


def master_key(password: bytes) -> bytes:
    """The key a bookie stores per ledger; derived, never the password itself."""
    return hashlib.sha256(b"pyspark-ledger/master-key\0" + bytes(password)).digest()


def salted_check(label: bytes, secret: bytes, salt: bytes | None = None) -> str:
    """``sha256$<salt>$<digest>``: a salted hash of ``secret`` for ``label``, kept in ledger metadata to check a
    secret against without keeping it (``password_check``, and ``metadata.model.master_key_check``)."""
    salt = os.urandom(8) if salt is None else salt
    digest = hashlib.sha256(label + b"\0" + salt + bytes(secret)).hexdigest()
    return f"{CHECK_PREFIX}${salt.hex()}${digest}"


def check_salt(check: str) -> bytes:
    """The salt of a ``salted_check`` value; ValueError if it is malformed."""
    prefix, salt_hex, _ = check.split("$")
    if prefix != CHECK_PREFIX:
        raise ValueError(f"unknown check kind {prefix!r}")
    return bytes.fromhex(salt_hex)


def password_check(password: bytes, salt: bytes | None = None) -> str:
    """A salted hash kept in ledger metadata so a wrong password is refused early."""
    return salted_check(b"pyspark-ledger/password-check", password, salt)


def verify_password(password: bytes, check: str) -> None:
    """Raise UnauthorizedError unless ``password`` matches a ``password_check`` value."""
    try:
        expected = password_check(password, check_salt(check))
    except ValueError as exc:
        raise CorruptEntryError(f"malformed password check in ledger metadata: {check!r}") from exc
    if not hmac.compare_digest(expected, check):
        raise UnauthorizedError("wrong password for this ledger")


def _crc32c_function():
    """``crc32c.crc32c``, imported at the first codec that needs it: the package's import looks up its own
    version in the installed distributions (a scan of sys.path), a cost every fresh Spark planner process
    paid on importing the data source although only the processes that code entries need it."""
    import crc32c

    return crc32c.crc32c


class EntryCodec:
    """Encodes and verifies entries of one ledger's digest type and password."""

    def __init__(self, digest_type: str = DIGEST_CRC32C, password: bytes = b"") -> None:
        self.digest_type = check_digest_type(digest_type)
        self._code = _DIGEST_CODES[self.digest_type]
        self._digest_size = _DIGEST_SIZES[self.digest_type]
        self._mac_key = hashlib.sha256(b"pyspark-ledger/mac-key\0" + bytes(password)).digest()
        self._crc32c = _crc32c_function() if self.digest_type == DIGEST_CRC32C else None

    def _digest(self, header: bytes, payload: bytes | memoryview) -> bytes:
        if self._crc32c is not None:
            crc = self._crc32c(payload, value=self._crc32c(header))
            return crc.to_bytes(4, "big")
        mac = hmac.new(self._mac_key, header, hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    def encode(self, ledger_id: int, entry_id: int, last_add_confirmed: int, length: int,
               payload: bytes | memoryview) -> bytes:
        return b"".join((self.encode_head(ledger_id, entry_id, last_add_confirmed, length, payload), payload))

    def encode_head(self, ledger_id: int, entry_id: int, last_add_confirmed: int, length: int,
                    payload: bytes | memoryview) -> bytes:
        """The encoded entry's bytes before its payload (header and digest): ``encode`` is head + payload."""
        header = _HEADER.pack(MAGIC, VERSION, self._code, ledger_id, entry_id, last_add_confirmed, length)
        crc32c = self._crc32c
        if crc32c is not None:  # ``_digest`` inline: a writer encodes every entry here
            return header + crc32c(payload, value=crc32c(header)).to_bytes(4, "big")
        return header + self._digest(header, payload)

    def decode(self, body: bytes, ledger_id: int | None = None, entry_id: int | None = None, *,
               copy: bool = True) -> DecodedEntry:
        """Verify the digest (and the expected ids) and return the entry.

        The payload is a copy (``bytes``); with ``copy=False`` it is a read-only
        ``memoryview`` into ``body`` (no copy: it keeps ``body`` alive).
        """
        head = peek_header(body)
        if head.digest_type != self.digest_type:
            raise CorruptEntryError(
                f"entry {head.entry_id} uses digest {head.digest_type}, the ledger uses {self.digest_type}"
            )
        view = memoryview(body)
        digest_end = HEADER_SIZE + self._digest_size
        payload = view[digest_end:]
        expected = self._digest(bytes(view[:HEADER_SIZE]), payload)
        if not hmac.compare_digest(expected, bytes(view[HEADER_SIZE:digest_end])):
            raise CorruptEntryError(
                f"digest mismatch for ledger {head.ledger_id} entry {head.entry_id}"
                " (corrupt replica, or wrong password for an hmac ledger)"
            )
        if (ledger_id is not None and head.ledger_id != ledger_id) or (
            entry_id is not None and head.entry_id != entry_id
        ):
            raise CorruptEntryError(
                f"asked for ledger {ledger_id} entry {entry_id}, got ledger {head.ledger_id} entry {head.entry_id}"
            )
        if copy:
            payload = bytes(payload)
        elif not payload.readonly:
            payload = payload.toreadonly()
        return DecodedEntry(head.ledger_id, head.entry_id, head.last_add_confirmed, head.length, payload)
