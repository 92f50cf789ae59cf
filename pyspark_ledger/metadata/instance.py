"""The identity of a metadata store: a random instance id kept in the store itself.

Every store holds one under the versioned key ``instance-id``, created with
the store (a new SQLite file gets it in the transaction that creates its
schema; a ZooKeeper store when it is opened and has none). A restored copy
of a store (a backup of the SQLite file, a ZooKeeper snapshot) keeps its id;
a new, empty store at the same URI has another one. Bookies record the id of
the store they registered with beside their cookie (``bookie_server.cookie``)
and neither start nor collect garbage against a store with another id.
"""
from __future__ import annotations

import re
import uuid

from pyspark_ledger.errors import InvalidConfigurationError, MetadataError, MetadataExistsError, NoSuchKeyError

INSTANCE_KEY = "instance-id"
_ID_PATTERN = re.compile(r"[0-9a-f]{32}")


def new_instance_id() -> str:
    return uuid.uuid4().hex


def check_instance_id(value: object, what: str) -> str:
    """``value`` if it is an instance id (32 lowercase hex digits); InvalidConfigurationError naming ``what``."""
    if not isinstance(value, str) or not _ID_PATTERN.fullmatch(value):
        raise InvalidConfigurationError(f"{what} must be a metadata store instance id (32 hex digits, as printed "
                                        f"by the bookie that refused the store), got {value!r}")
    return value


def read_instance_id(store) -> str | None:
    """The store's instance id, or None if it has none (a store made before instance ids existed)."""
    try:
        raw = store.get(INSTANCE_KEY).value
    except NoSuchKeyError:
        return None
    try:
        return check_instance_id(raw.decode("ascii"), "the instance id")
    except (UnicodeDecodeError, InvalidConfigurationError) as exc:
        raise MetadataError(f"metadata store {store.uri}: its instance id {raw[:64]!r} is damaged") from exc


def ensure_instance_id(store) -> str:
    """The store's instance id, created (a new random one) if it has none."""
    found = read_instance_id(store)
    if found is not None:
        return found
    try:
        store.create(INSTANCE_KEY, new_instance_id().encode("ascii"))
    except MetadataExistsError:
        pass  # another process created it first: use theirs
    found = read_instance_id(store)
    if found is None:
        raise MetadataError(f"metadata store {store.uri}: its instance id vanished just after it was created")
    return found
