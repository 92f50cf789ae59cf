"""Ledger metadata: the record kept per ledger in the metadata store.

Pure data and its JSON form; the rules for changing it (ensemble changes,
recovery, close) live in ``pyspark_ledger.protocol``.
"""
from __future__ import annotations

import base64
import hmac
import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from pyspark_ledger.entry import check_salt, salted_check
from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError, MetadataError

OPEN = "OPEN"
IN_RECOVERY = "IN_RECOVERY"
CLOSED = "CLOSED"
STATES = (OPEN, IN_RECOVERY, CLOSED)
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Fragment:
    """The ensemble that stores entries from ``first_entry_id`` up to the next fragment."""

    first_entry_id: int
    bookies: tuple[str, ...]

    def __iter__(self):  # lets users unpack: ``first, bookies = fragment``
        return iter((self.first_entry_id, list(self.bookies)))


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise unless E >= Qw >= Qa >= 1, naming the violated rule."""
    for name, value in (("ensemble_size", ensemble_size), ("write_quorum", write_quorum),
                        ("ack_quorum", ack_quorum)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidConfigurationError(f"{name} must be a positive integer, got {value!r}")
    if not ensemble_size >= write_quorum >= ack_quorum:
        raise InvalidConfigurationError(
            f"need ensemble_size >= write_quorum >= ack_quorum, got E={ensemble_size}, "
            f"Qw={write_quorum}, Qa={ack_quorum}"
        )




def master_key_check(master_key: bytes, salt: bytes | None = None) -> str:
    """A salted hash of a ledger's master key, kept in its metadata: a bookie that has no state for the
    ledger yet checks a first add or fence against it (a caller who knows the id but not the password
    cannot create the ledger there first). The key cannot be recovered from it."""
    return salted_check(b"pyspark-ledger/master-key-check", master_key, salt)


def master_key_matches(master_key: bytes, check: str) -> bool:
    """Whether ``master_key`` is the one ``check`` (from ``master_key_check``) was made of; False if malformed."""
    try:
        salt = check_salt(check)
    except ValueError:
        return False
    return hmac.compare_digest(master_key_check(master_key, salt), check)


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    fragments: tuple[Fragment, ...]
    state: str = OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: str = "crc32c"
    password_check: str = ""
    master_key_check: str = ""  # see master_key_check(); "" for ledgers created before it existed
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    ctime_ms: int = 0
    #: The password sealed to the cluster's repair key (``security.repair_key``); "" if there was none.
    repair_secret: str = ""

    def __post_init__(self) -> None:
        check_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)
        if self.state not in STATES:
            raise InvalidArgumentError(f"unknown ledger state {self.state!r}")
        if not self.fragments:
            raise InvalidArgumentError("ledger metadata needs at least one fragment")
        previous = -1
        for index, fragment in enumerate(self.fragments):
            if len(fragment.bookies) != self.ensemble_size:
                raise InvalidArgumentError(
                    f"fragment at entry {fragment.first_entry_id} has {len(fragment.bookies)} bookies,"
                    f" ensemble size is {self.ensemble_size}"
                )
            if index == 0 and fragment.first_entry_id != 0:
                raise InvalidArgumentError("the first fragment must start at entry 0")
            if index > 0 and fragment.first_entry_id <= previous:
                raise InvalidArgumentError("fragment first entry ids must strictly increase")
            previous = fragment.first_entry_id

    @property
    def is_closed(self) -> bool:
        return self.state == CLOSED

    @property
    def current_fragment(self) -> Fragment:
        return self.fragments[-1]

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the fragment that holds ``entry_id``."""
        chosen = self.fragments[0]
        for fragment in self.fragments:
            if fragment.first_entry_id > entry_id:
                break
            chosen = fragment
        return chosen.bookies

    def with_changes(self, **changes: Any) -> "LedgerMetadata":
        return replace(self, **changes)

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT_VERSION,
            "ledger_id": self.ledger_id,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "state": self.state,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "fragments": [[f.first_entry_id, list(f.bookies)] for f in self.fragments],
            "digest_type": self.digest_type,
            "password_check": self.password_check,
            **({"master_key_check": self.master_key_check} if self.master_key_check else {}),
            "custom_metadata": {k: base64.b64encode(v).decode() for k, v in self.custom_metadata.items()},
            "ctime_ms": self.ctime_ms,
            **({"repair_secret": self.repair_secret} if self.repair_secret else {}),
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "LedgerMetadata":
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT_VERSION:
                raise ValueError(f"unsupported metadata format {doc.get('format')!r}")
            return cls(
                ledger_id=int(doc["ledger_id"]),
                ensemble_size=int(doc["ensemble_size"]),
                write_quorum=int(doc["write_quorum"]),
                ack_quorum=int(doc["ack_quorum"]),
                state=doc["state"],
                last_entry_id=int(doc["last_entry_id"]),
                length=int(doc["length"]),
                fragments=tuple(Fragment(int(first), tuple(bookies)) for first, bookies in doc["fragments"]),
                digest_type=doc["digest_type"],
                password_check=doc["password_check"],
                master_key_check=str(doc.get("master_key_check", "")),
                custom_metadata={k: base64.b64decode(v) for k, v in doc["custom_metadata"].items()},
                ctime_ms=int(doc["ctime_ms"]),
                repair_secret=str(doc.get("repair_secret", "")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MetadataError(f"unreadable ledger metadata: {exc}") from exc
