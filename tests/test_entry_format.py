"""The entry format: encode/decode round trips, digests catch every corruption, keys."""
from __future__ import annotations

import pytest

from pyspark_ledger.entry import (
    HEADER_SIZE, EntryCodec, check_digest_type, master_key, password_check, peek_header, verify_password,
)
from pyspark_ledger.errors import CorruptEntryError, InvalidConfigurationError, UnauthorizedError

DIGESTS = ["crc32c", "hmac-sha256"]


@pytest.mark.parametrize("digest", DIGESTS)
@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 4099])
def test_round_trip(digest, payload):
    codec = EntryCodec(digest, b"secret")
    body = codec.encode(7, 42, 41, 1234, payload)
    entry = codec.decode(body, 7, 42)
    assert (entry.ledger_id, entry.entry_id, entry.last_add_confirmed, entry.length) == (7, 42, 41, 1234)
    assert entry.payload == payload
    assert codec.encode_head(7, 42, 41, 1234, payload) + payload == body


@pytest.mark.parametrize("digest", DIGESTS)
def test_header_is_readable_without_the_key(digest):
    body = EntryCodec(digest, b"pw").encode(2**63 - 1, 5, -1, 9, b"abc")
    head = peek_header(body)
    assert (head.ledger_id, head.entry_id, head.last_add_confirmed, head.length) == (2**63 - 1, 5, -1, 9)
    assert head.digest_type == digest


@pytest.mark.parametrize("digest", DIGESTS)
def test_every_flipped_byte_is_detected(digest):
    codec = EntryCodec(digest, b"pw")
    body = codec.encode(1, 2, 1, 30, b"payload-bytes")
    for position in range(len(body)):
        corrupt = bytearray(body)
        corrupt[position] ^= 0x01
        with pytest.raises(CorruptEntryError):
            codec.decode(bytes(corrupt), 1, 2)


def test_hmac_with_wrong_password_fails_and_crc_does_not_depend_on_it():
    body = EntryCodec("hmac-sha256", b"right").encode(1, 0, -1, 3, b"abc")
    with pytest.raises(CorruptEntryError):
        EntryCodec("hmac-sha256", b"wrong").decode(body)
    crc_body = EntryCodec("crc32c", b"right").encode(1, 0, -1, 3, b"abc")
    assert EntryCodec("crc32c", b"other").decode(crc_body).payload == b"abc"


def test_unexpected_ids_and_digest_type_are_corrupt():
    codec = EntryCodec("crc32c")
    body = codec.encode(1, 2, 1, 3, b"abc")
    with pytest.raises(CorruptEntryError, match="asked for ledger 1 entry 3"):
        codec.decode(body, 1, 3)
    with pytest.raises(CorruptEntryError, match="digest"):
        EntryCodec("hmac-sha256").decode(body)


@pytest.mark.parametrize("body", [b"", b"LE", b"XX" + bytes(HEADER_SIZE + 4), b"LE\x09\x01" + bytes(40)])
def test_garbage_is_corrupt_not_a_crash(body):
    with pytest.raises(CorruptEntryError):
        peek_header(body)


def test_digest_names():
    assert check_digest_type("CRC32C") == "crc32c"
    assert check_digest_type("hmac") == "hmac-sha256"
    with pytest.raises(InvalidConfigurationError, match="crc32c, hmac-sha256"):
        check_digest_type("md5")


def test_password_derivations():
    assert master_key(b"a") != master_key(b"b")
    assert len(master_key(b"")) == 32
    check = password_check(b"pw")
    verify_password(b"pw", check)
    with pytest.raises(UnauthorizedError):
        verify_password(b"nope", check)
    assert password_check(b"pw") != check, "each check has its own salt"
