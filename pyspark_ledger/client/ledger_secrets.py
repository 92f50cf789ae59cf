"""Which password opens a ledger, and who may act on it: a client's view of the repair key.

``LedgerSecrets`` holds what a LedgerClient knows about the cluster's repair
key: the public half (read from the metadata store once, then cached) to seal
the password of every ledger it creates, and -- for an administrator's client
(``ClientConfig.repair_key_file``) -- the private half that opens them.

For repair (re-replication, recovery) a ledger's password is, in order: the
password the caller gave (checked), else its sealed secret opened with the
repair key, else the first of the caller's candidate passwords that matches
its ``password_check``. Delete is allowed with the matching password or with
the repair key opening the ledger's secret; anything else is UnauthorizedError.
"""
from __future__ import annotations

import hmac
import threading
from typing import TYPE_CHECKING, Sequence

from pyspark_ledger.entry import check_salt, password_check, verify_password
from pyspark_ledger.errors import RepairKeyError, UnauthorizedError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import MetadataStore

if TYPE_CHECKING:  # repair_key imports cryptography: loaded only when a key is read or a secret opened
    from pyspark_ledger.security.repair_key import RepairKey, RepairPublicKey

_UNREAD = object()


class LedgerSecrets:
    """Sealing for new ledgers; finding and checking the passwords of existing ones."""

    def __init__(self, store: MetadataStore, repair_key_file: str | None) -> None:
        self._store = store
        self.repair_key: RepairKey | None = None
        if repair_key_file is not None:
            from pyspark_ledger.security.repair_key import load_private_key
            self.repair_key = load_private_key(repair_key_file)
        self._public = _UNREAD
        self._lock = threading.Lock()

    def public_key(self) -> RepairPublicKey | None:
        """The cluster's repair public key (read once per client), or None if the cluster has none."""
        with self._lock:
            if self._public is _UNREAD:
                from pyspark_ledger.security.repair_store import read_repair_public_key
                self._public = read_repair_public_key(self._store)
            return self._public

    def seal(self, password: bytes, ledger_id: int) -> str:
        """The password sealed for a new ledger, or "" when the cluster has no repair key."""
        public = self.public_key()
        return "" if public is None else public.seal(password, ledger_id)

    def password_for(self, metadata: LedgerMetadata, password: bytes | None,
                     candidates: Sequence[bytes] = ()) -> bytes:
        """The ledger's password for a repair (see the module docstring); UnauthorizedError saying
        what is missing when nothing opens it."""
        if password is not None:
            verify_password(password, metadata.password_check)
            return password
        unsealed, why = self._unsealed(metadata)
        if unsealed is not None:
            return unsealed
        for candidate in candidates:
            if matches(candidate, metadata.password_check):
                return candidate
        tried = f"none of the {len(candidates)} passwords given matches" if candidates else "no password was given"
        raise UnauthorizedError(f"ledger {metadata.ledger_id}: {tried}, and {why}")

    def authorize_delete(self, metadata: LedgerMetadata, password: bytes | None) -> None:
        """Return if the caller may delete the ledger; else UnauthorizedError saying how to get authority."""
        if matches(b"" if password is None else password, metadata.password_check):
            return
        unsealed, why = self._unsealed(metadata)
        if unsealed is not None:
            return
        given = "no password was given" if password is None else "the password given is wrong"
        raise UnauthorizedError(
            f"deleting ledger {metadata.ledger_id} needs authority: {given}, and {why}; give the ledger's password "
            "or use the cluster's repair key (--repair-key FILE / LEDGER_REPAIR_KEY, ClientConfig.repair_key_file)")

    def _unsealed(self, metadata: LedgerMetadata) -> tuple[bytes | None, str]:
        """The ledger's password opened with the repair key (checked), or None and why not."""
        if not metadata.repair_secret:
            return None, "it has no sealed secret (created before the cluster had a repair key): its password is needed"
        if self.repair_key is None:
            from pyspark_ledger.security.repair_key import sealed_key_id
            try:
                needed = sealed_key_id(metadata.repair_secret)
            except RepairKeyError:
                needed = "?"
            return None, f"this client does not hold the repair key ({needed}) its secret is sealed to"
        try:
            secret = self.repair_key.unseal(metadata.repair_secret, metadata.ledger_id)
        except RepairKeyError as exc:
            return None, str(exc)
        if not matches(secret, metadata.password_check):
            return None, "its sealed secret does not match its password check"
        return secret, ""


def matches(password: bytes, check: str) -> bool:
    """Whether ``password`` matches a ledger's ``password_check`` (False if the check is malformed)."""
    try:
        return hmac.compare_digest(password_check(password, check_salt(check)), check)
    except ValueError:
        return False
