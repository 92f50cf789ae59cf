"""The repair key: sealing ledger passwords to the cluster's key and opening them with its private half."""
from __future__ import annotations

import base64
import os
import stat

import pytest

from pyspark_ledger.errors import RepairKeyError
from pyspark_ledger.security.repair_key import (MAX_SECRET_BYTES, RepairKey, RepairPublicKey, load_private_key,
                                                save_private_key, sealed_key_id)


@pytest.fixture(scope="module")
def key() -> RepairKey:
    return RepairKey.generate()


@pytest.mark.parametrize("secret", [b"", b"pw", "pässwörd".encode(), os.urandom(MAX_SECRET_BYTES)])
def test_a_sealed_secret_opens_with_the_private_key(key, secret):
    sealed = key.public.seal(secret, 42)
    assert key.unseal(sealed, 42) == secret
    assert sealed_key_id(sealed) == key.key_id


def test_sealing_is_randomised_and_hides_the_secret(key):
    one, two = key.public.seal(b"hunter2", 7), key.public.seal(b"hunter2", 7)
    assert one != two
    for sealed in (one, two):
        assert b"hunter2" not in base64.b64decode(sealed.split("$")[2])
        assert "hunter2" not in sealed


def test_another_key_cannot_open_it_and_the_error_names_the_key_needed(key):
    other = RepairKey.generate()
    sealed = key.public.seal(b"pw", 1)
    with pytest.raises(RepairKeyError, match=f"sealed to repair key {key.key_id}.*this repair key is {other.key_id}"):
        other.unseal(sealed, 1)


def test_another_key_forging_the_key_id_still_cannot_open_it(key):
    other = RepairKey.generate()
    kind, _, body = key.public.seal(b"pw", 1).split("$")
    with pytest.raises(RepairKeyError, match="does not open"):
        other.unseal(f"{kind}${other.key_id}${body}", 1)


def test_a_secret_moved_to_another_ledger_does_not_open(key):
    sealed = key.public.seal(b"pw", 1)
    with pytest.raises(RepairKeyError, match="ledger 2 does not open.*another ledger"):
        key.unseal(sealed, 2)


@pytest.mark.parametrize("position", [0, 31, 32, 43, 44, -1])  # ephemeral key, nonce, ciphertext, tag
def test_any_flipped_bit_is_detected(key, position):
    kind, key_id, text = key.public.seal(b"secret password", 5).split("$")
    body = bytearray(base64.b64decode(text))
    body[position] ^= 0x01
    with pytest.raises(RepairKeyError):
        key.unseal(f"{kind}${key_id}${base64.b64encode(bytes(body)).decode()}", 5)


@pytest.mark.parametrize("sealed", [
    None, 5, b"x25519$0123456789abcdef$AAAA", "", "x25519", "x25519$abc", "x25519$a$b$c",
    "rsa$0123456789abcdef$" + "A" * 100, "x25519$0123456789ABCDEF$" + "A" * 100, "x25519$0123$" + "A" * 100,
    "x25519$0123456789abcdef$not base64!", "x25519$0123456789abcdef$" + base64.b64encode(b"short").decode(),
])
def test_malformed_sealed_secrets_raise_repair_key_error(key, sealed):
    with pytest.raises(RepairKeyError, match="malformed sealed secret"):
        key.unseal(sealed, 1)


@pytest.mark.parametrize("ledger_id", [-1, 2**63, True, "1", None])
def test_ledger_ids_are_checked(key, ledger_id):
    with pytest.raises(RepairKeyError, match="ledger id"):
        key.public.seal(b"pw", ledger_id)


def test_secrets_are_bytes_of_bounded_size(key):
    with pytest.raises(RepairKeyError, match="must be bytes"):
        key.public.seal("pw", 1)
    with pytest.raises(RepairKeyError, match=f"at most {MAX_SECRET_BYTES} bytes"):
        key.public.seal(b"x" * (MAX_SECRET_BYTES + 1), 1)


def test_the_public_document_round_trips_and_is_checked(key):
    again = RepairPublicKey.from_document(key.public.to_document())
    assert again.key_id == key.key_id
    assert key.unseal(again.seal(b"pw", 3), 3) == b"pw"
    other = RepairKey.generate().public.to_document().replace(b'"key_id": "', b'"key_id": "x')
    for bad in (b"", b"{}", b"[]", b"not json", other,
                key.public.to_document().replace(b'"format": 1', b'"format": 2')):
        with pytest.raises(RepairKeyError, match="unreadable repair public key"):
            RepairPublicKey.from_document(bad)


def test_the_private_key_file_is_created_0600_and_loads(tmp_path, key):
    path = tmp_path / "repair.key"
    old = os.umask(0)
    try:
        save_private_key(key, str(path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = load_private_key(str(path))
    assert loaded.key_id == key.key_id
    assert loaded.unseal(key.public.seal(b"pw", 9), 9) == b"pw"


def test_an_existing_file_is_never_overwritten(tmp_path, key):
    path = tmp_path / "repair.key"
    path.write_bytes(b"precious")
    with pytest.raises(RepairKeyError, match="already exists.*never overwritten"):
        save_private_key(key, str(path))
    assert path.read_bytes() == b"precious"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_a_key_file_others_can_read_is_refused(tmp_path, key, mode):
    path = tmp_path / "repair.key"
    save_private_key(key, str(path))
    path.chmod(mode)
    with pytest.raises(RepairKeyError, match=f"readable by group or others.*chmod 600 {path}"):
        load_private_key(str(path))


def test_unusable_key_files_raise_repair_key_error(tmp_path):
    missing = tmp_path / "missing.key"
    with pytest.raises(RepairKeyError, match="repair key file .*cannot read it"):
        load_private_key(str(missing))
    with pytest.raises(RepairKeyError, match="not a regular file"):
        os.chmod(tmp_path, 0o700)
        load_private_key(str(tmp_path))
    for name, data, message in (("garbage.key", b"garbage", "is not a repair key file"),
                                ("huge.key", b"x" * 10_000, r"10000 bytes, over the limit of \d+")):
        path = tmp_path / name
        path.write_bytes(data)
        path.chmod(0o600)
        with pytest.raises(RepairKeyError, match=message):
            load_private_key(str(path))
    with pytest.raises(RepairKeyError, match="must be a path"):
        load_private_key("")


def test_a_key_file_of_another_kind_is_refused(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = tmp_path / "ec.key"
    path.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.chmod(0o600)
    with pytest.raises(RepairKeyError, match="not an X25519 repair key"):
        load_private_key(str(path))
