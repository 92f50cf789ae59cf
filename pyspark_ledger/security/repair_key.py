"""The cluster's repair key: ledger passwords sealed in metadata, opened only by administrators.

A repair key is an X25519 key pair. Its public half is kept in the metadata
store (``repair_store``); every client that creates a ledger seals the
ledger's password to it, and the sealed secret goes into the ledger's
metadata. Its private half lives in a file only administrators hold (created
mode 0600); with it, re-replication, recovery and delete can open any
ledger's password. Whoever reads the metadata without the file learns no
password.

Sealing (one password, one ledger): a fresh ephemeral X25519 key agrees a
shared secret with the repair key's public half; HKDF-SHA256 (info binds both
public keys) turns it into an AES-256-GCM key; the password is encrypted
with the ledger id and the repair key's id as associated data, so a sealed
secret copied into another ledger's metadata does not open. The text form is
``x25519$<key id>$<base64 of ephemeral public key | nonce | ciphertext>``;
the key id (a fingerprint of the public half) tells which key a secret needs.

Every failure -- wrong key, tampered or moved secret, malformed text or
file, a key file others can read -- raises ``RepairKeyError``.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from pyspark_ledger.errors import RepairKeyError
from pyspark_ledger.private_files import read_checked_file

SEALED_KIND = "x25519"
KEY_BYTES = 32
NONCE_BYTES = 12
#: Longest password that can be sealed (passwords are short secrets, not data).
MAX_SECRET_BYTES = 4096
#: A private key file is a PEM of ~120 bytes; anything much larger is not one.
MAX_KEY_FILE_BYTES = 4096
_INFO = b"pyspark-ledger/repair-secret/v1"
_ID_LABEL = b"pyspark-ledger/repair-key-id\0"
_PUBLIC_FORMAT = 1


class RepairPublicKey:
    """The public half: seals passwords; kept in the metadata store as a small JSON document."""

    def __init__(self, raw: bytes) -> None:
        if not isinstance(raw, (bytes, bytearray)) or len(raw) != KEY_BYTES:
            raise RepairKeyError(f"a repair public key is {KEY_BYTES} bytes, got {raw!r:.60}")
        self.raw = bytes(raw)
        self._key = X25519PublicKey.from_public_bytes(self.raw)
        self.key_id = key_id_of(self.raw)

    def seal(self, secret: bytes, ledger_id: int) -> str:
        """``secret`` encrypted to this key for ledger ``ledger_id`` (text for the metadata)."""
        secret = _secret(secret)
        ephemeral = X25519PrivateKey.generate()
        ephemeral_raw = _raw_public(ephemeral.public_key())
        cipher = AESGCM(_derive(ephemeral.exchange(self._key), ephemeral_raw, self.raw))
        nonce = os.urandom(NONCE_BYTES)
        body = ephemeral_raw + nonce + cipher.encrypt(nonce, secret, _associated(ledger_id, self.key_id))
        return f"{SEALED_KIND}${self.key_id}${base64.b64encode(body).decode()}"

    def to_document(self) -> bytes:
        return json.dumps({"format": _PUBLIC_FORMAT, "algorithm": SEALED_KIND, "key_id": self.key_id,
                           "public_key": base64.b64encode(self.raw).decode()}, sort_keys=True).encode()

    @classmethod
    def from_document(cls, data: bytes) -> "RepairPublicKey":
        try:
            doc = json.loads(data)
            if doc.get("format") != _PUBLIC_FORMAT or doc.get("algorithm") != SEALED_KIND:
                raise ValueError(f"unsupported format {doc.get('format')!r} / algorithm {doc.get('algorithm')!r}")
            key = cls(base64.b64decode(doc["public_key"], validate=True))
            if key.key_id != doc["key_id"]:
                raise ValueError(f"key id {doc['key_id']!r} does not match the key ({key.key_id})")
            return key
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise RepairKeyError(f"unreadable repair public key in the metadata store: {exc}") from exc


class RepairKey:
    """The private half: opens secrets sealed to its public half."""

    def __init__(self, private: X25519PrivateKey) -> None:
        self._private = private
        self.public = RepairPublicKey(_raw_public(private.public_key()))
        self.key_id = self.public.key_id

    @classmethod
    def generate(cls) -> "RepairKey":
        return cls(X25519PrivateKey.generate())

    def unseal(self, sealed: str, ledger_id: int) -> bytes:
        """The secret sealed for ``ledger_id``; RepairKeyError if it needs another key, was tampered
        with, belongs to another ledger or is malformed."""
        needed, body = _parse(sealed)
        if needed != self.key_id:
            raise RepairKeyError(f"the secret of ledger {ledger_id} is sealed to repair key {needed}; "
                                 f"this repair key is {self.key_id}")
        ephemeral_raw, nonce, ciphertext = (body[:KEY_BYTES], body[KEY_BYTES:KEY_BYTES + NONCE_BYTES],
                                            body[KEY_BYTES + NONCE_BYTES:])
        try:
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(ephemeral_raw))
            cipher = AESGCM(_derive(shared, ephemeral_raw, self.public.raw))
            return cipher.decrypt(nonce, ciphertext, _associated(ledger_id, self.key_id))
        except (InvalidTag, ValueError) as exc:
            raise RepairKeyError(f"the sealed secret of ledger {ledger_id} does not open with repair key "
                                 f"{self.key_id}: it was altered or belongs to another ledger") from exc

    def to_pem(self) -> bytes:
        return self._private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption())


def key_id_of(public_raw: bytes) -> str:
    """16 hex digits naming a repair key (from its public half)."""
    return hashlib.sha256(_ID_LABEL + public_raw).hexdigest()[:16]


def sealed_key_id(sealed: str) -> str:
    """The id of the repair key a sealed secret needs; RepairKeyError if malformed."""
    return _parse(sealed)[0]


def save_private_key(key: RepairKey, path: str) -> None:
    """Write the private half to a NEW file, mode 0600; RepairKeyError if the file exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise RepairKeyError(f"{path} already exists: a repair key file is never overwritten "
                             "(secrets sealed to the old key would become unreadable); choose another path") from exc
    except OSError as exc:
        raise RepairKeyError(f"cannot create repair key file {path}: {exc.strerror}") from exc
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        with os.fdopen(fd, "wb") as out:
            out.write(key.to_pem())
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise RepairKeyError(f"cannot write repair key file {path}: {exc.strerror}") from exc


def load_private_key(path: str) -> RepairKey:
    """Read a repair key file; RepairKeyError if it is missing, malformed, or readable by group or others."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise RepairKeyError(f"repair key file must be a path, got {path!r}")
    data = read_checked_file(path, f"repair key file {path} (it opens every ledger's password)",
                             limit=MAX_KEY_FILE_BYTES, error=RepairKeyError, private=True)
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise RepairKeyError(f"{path} is not a repair key file (expected the PEM that "
                             "`ledger security init-repair-key` writes)") from exc
    if not isinstance(private, X25519PrivateKey):
        raise RepairKeyError(f"{path} holds a {type(private).__name__}, not an X25519 repair key")
    return RepairKey(private)


def _parse(sealed: object) -> tuple[str, bytes]:
    if not isinstance(sealed, str) or sealed.count("$") != 2:
        raise RepairKeyError(f"malformed sealed secret {sealed!r:.80}: expected {SEALED_KIND}$<key id>$<base64>")
    kind, key_id, text = sealed.split("$")
    try:
        if kind != SEALED_KIND:
            raise ValueError(f"unknown kind {kind!r}")
        if len(key_id) != 16 or any(c not in "0123456789abcdef" for c in key_id):
            raise ValueError(f"bad key id {key_id!r}")
        body = base64.b64decode(text, validate=True)
        if len(body) < KEY_BYTES + NONCE_BYTES + 16:
            raise ValueError("too short")
    except (ValueError, binascii.Error) as exc:
        raise RepairKeyError(f"malformed sealed secret {sealed!r:.80}: {exc}") from exc
    return key_id, body


def _secret(secret: object) -> bytes:
    if not isinstance(secret, (bytes, bytearray)):
        raise RepairKeyError(f"the secret to seal must be bytes, got {type(secret).__name__}")
    if len(secret) > MAX_SECRET_BYTES:
        raise RepairKeyError(f"a sealed secret is at most {MAX_SECRET_BYTES} bytes, got {len(secret)}")
    return bytes(secret)


def _associated(ledger_id: int, key_id: str) -> bytes:
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int) or not 0 <= ledger_id < 2**63:
        raise RepairKeyError(f"ledger id must be an integer in 0..2**63-1, got {ledger_id!r}")
    return _INFO + b"\0" + ledger_id.to_bytes(8, "big") + key_id.encode()


def _derive(shared: bytes, ephemeral_raw: bytes, recipient_raw: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_INFO + ephemeral_raw + recipient_raw).derive(shared)


def _raw_public(public: X25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


__all__ = ["RepairKey", "RepairPublicKey", "key_id_of", "load_private_key", "save_private_key", "sealed_key_id"]
