"""The public half of the cluster's repair key in the metadata store (one fixed key, never replaced)."""
from __future__ import annotations

from pyspark_ledger.errors import MetadataExistsError, NoSuchKeyError, RepairKeyError
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.security.repair_key import RepairPublicKey

#: Where the public half lives (a generic versioned key of the store).
REPAIR_KEY_PATH = "security/repair-key"


def read_repair_public_key(store: MetadataStore) -> RepairPublicKey | None:
    """The cluster's repair public key, or None if it has none yet."""
    try:
        return RepairPublicKey.from_document(store.get(REPAIR_KEY_PATH).value)
    except NoSuchKeyError:
        return None


def register_repair_public_key(store: MetadataStore, public: RepairPublicKey) -> None:
    """Store the public half; RepairKeyError if the cluster already has one (it is never replaced: the
    secrets sealed to it would become unreadable)."""
    try:
        store.create(REPAIR_KEY_PATH, public.to_document())
    except MetadataExistsError:
        existing = read_repair_public_key(store)
        held = existing.key_id if existing is not None else "?"
        raise RepairKeyError(
            f"this cluster already has repair key {held}: keep using its private key file (--repair-key FILE or "
            "LEDGER_REPAIR_KEY); it is never replaced, since every ledger's sealed password needs it") from None
