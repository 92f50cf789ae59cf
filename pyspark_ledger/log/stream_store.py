"""Stream records in the metadata store: read, create, compare-and-set loop, delete, list.

``update_stream(store, name, transition)`` is the one way a record changes:
read it, apply a pure transition (``log_transitions``), write it back with
compare-and-set on the version read, and on a lost CAS read again and re-apply.
The store's errors surface as the store raised them, with the missing key
reworded as a missing stream. An unknown outcome (the store failed during the
write) is raised, not retried: the caller decides (commits are idempotent).
"""
from __future__ import annotations

from typing import Callable

from pyspark_ledger.errors import MetadataError, MetadataExistsError, MetadataVersionConflictError, NoSuchKeyError
from pyspark_ledger.log.log_metadata import STREAMS_ROOT, StreamRecord, decode, encode, stream_key
from pyspark_ledger.metadata.store import MetadataStore, Versioned

MAX_CAS_ATTEMPTS = 100
Transition = Callable[[StreamRecord], "StreamRecord | None"]


def read_stream(store: MetadataStore, name: str) -> Versioned[StreamRecord]:
    """The stored record and its version; NoSuchKeyError naming the stream if there is none."""
    try:
        stored = store.get(stream_key(name))
    except NoSuchKeyError as exc:
        raise NoSuchKeyError(f"stream {name!r} does not exist in {store.uri}: create it first "
                             "(StreamClient.create_stream)") from exc
    return Versioned(decode(stored.value, name), stored.version)


def create_stream_record(store: MetadataStore, record: StreamRecord) -> Versioned[StreamRecord]:
    try:
        version = store.create(stream_key(record.name), encode(record))
    except MetadataExistsError as exc:
        raise MetadataExistsError(f"stream {record.name!r} already exists in {store.uri}: open it, or delete "
                                  "it first") from exc
    return Versioned(record, version)


def update_stream(store: MetadataStore, name: str,
                  transition: Transition) -> tuple[Versioned[StreamRecord], bool]:
    """Apply ``transition`` by CAS until it sticks: (the stored record, whether it changed).

    ``transition`` returning None means "nothing to change"; its exceptions propagate.
    """
    stored = read_stream(store, name)
    for _ in range(MAX_CAS_ATTEMPTS):
        after = transition(stored.value)
        if after is None:
            return stored, False
        try:
            version = store.set(stream_key(name), encode(after), stored.version)
        except MetadataVersionConflictError:
            stored = read_stream(store, name)
            continue
        except NoSuchKeyError as exc:
            raise NoSuchKeyError(f"stream {name!r} was deleted while it was being changed") from exc
        return Versioned(after, version), True
    raise MetadataError(f"changing stream {name!r} lost {MAX_CAS_ATTEMPTS} compare-and-sets in a row: too many "
                        "concurrent writers of its record")


def delete_stream_record(store: MetadataStore, name: str, version: int) -> None:
    """Remove the record (compare-and-set on ``version``); a missing record is fine."""
    try:
        store.delete(stream_key(name), version)
    except NoSuchKeyError:
        return


def list_stream_names(store: MetadataStore) -> list[str]:
    return store.children(STREAMS_ROOT)
