"""Which metadata store a bookie's data belongs to: ``METADATA_STORE.json`` beside the cookie.

It keeps the instance id (``pyspark_ledger.metadata.instance``) of the store
the bookie registered with. The bookie refuses to start against a store with
another id (a lost store re-created empty, another cluster's store), since
that store would take every ledger the bookie holds for deleted, and its
garbage collector deletes nothing while the store's id is not this one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from pyspark_ledger.errors import DataDirectoryError

STORE_FILE = "METADATA_STORE.json"
FORMAT_VERSION = 1


def read_store_record(data_dir: Path) -> str | None:
    """The instance id recorded in ``data_dir``, or None if the bookie recorded none (new, or older)."""
    path = Path(data_dir) / STORE_FILE
    try:
        doc = json.loads(path.read_bytes())
        return str(doc["instance_id"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataDirectoryError(f"{path} (the metadata store this bookie's data belongs to) is unreadable "
                                 f"({exc}): restore it from a backup of the data dir") from exc


def write_store_record(data_dir: Path, instance_id: str, uri: str) -> None:
    """Record (atomically, durably) that the data in ``data_dir`` belongs to store ``instance_id``."""
    path = Path(data_dir) / STORE_FILE
    tmp = path.with_name(path.name + ".tmp")
    doc = {"format": FORMAT_VERSION, "instance_id": instance_id, "uri": uri}
    with open(tmp, "wb") as handle:
        handle.write(json.dumps(doc, sort_keys=True).encode())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def wrong_store_message(uri: str, data_dir: Path, bookie_id: str, found: str | None, recorded: str | None) -> str:
    """The one line a bookie refuses a store with: it names both ids and how to move knowingly, nothing that
    deletes data."""
    store = f"instance {found}" if found else "a store with no instance id"
    belongs = (f"instance {recorded}, recorded in {Path(data_dir) / STORE_FILE}" if recorded
               else "the store holding its cookie")
    move = (f" Only if this store really holds this bookie's ledgers (a migrated copy), pass --adopt-metadata-store "
            f"{found}" if found else "")
    return (f"metadata store {uri} ({store}) is not the store the data of bookie {bookie_id} in {data_dir} "
            f"belongs to ({belongs}); nothing was changed. Start the bookie with the --metadata it registered "
            "with, or restore that store if it was lost (a new, empty store would take every ledger here for "
            f"deleted).{move}")
