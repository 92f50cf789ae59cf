"""The sandbox's repair key: made in its data dir at the first start and registered with its metadata store,
so ``ledger autorecovery`` (with ``LEDGER_REPAIR_KEY``) repairs ledgers of any password."""
from __future__ import annotations

from pathlib import Path

from pyspark_ledger.errors import RepairKeyError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.security.repair_key import RepairKey, load_private_key, save_private_key
from pyspark_ledger.security.repair_store import read_repair_public_key, register_repair_public_key

REPAIR_KEY_FILE = "repair.key"


def ensure_repair_key(data_dir: Path, metadata_uri: str) -> Path | None:
    """The path of the cluster's repair key file in ``data_dir`` (made and registered if the cluster has
    none); None when the cluster's key was made elsewhere (its file is not here)."""
    path = data_dir / REPAIR_KEY_FILE
    with open_metadata_store(metadata_uri, create=True) as store:  # the sandbox creates its store
        registered = read_repair_public_key(store)
        if registered is None:
            key = load_private_key(str(path)) if path.exists() else _new_key(path)
            register_repair_public_key(store, key.public)
            return path
    if not path.exists():
        return None
    held = load_private_key(str(path))
    if held.key_id != registered.key_id:
        raise RepairKeyError(f"{path} holds repair key {held.key_id} but the sandbox's metadata store has "
                             f"{registered.key_id}: move {path} away to start without it")
    return path


def _new_key(path: Path) -> RepairKey:
    key = RepairKey.generate()
    save_private_key(key, str(path))
    return key
