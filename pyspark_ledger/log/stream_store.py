"""Stream records in the metadata store: read, create, compare-and-set loop, delete, list.

``update_stream(store, name, transition)`` is the one way a record changes:
read it, apply a pure transition (``log_transitions``), write it back with
compare-and-set on the version read, and on a lost CAS read again and re-apply
(``metadata.update_loop``, the loop ledger metadata changes go through too).
The store's errors surface as the store raised them, with the missing key
reworded as a missing stream. An unknown outcome (the store failed during the
write) is raised, not retried: the caller decides (commits are idempotent).
"""
from __future__ import annotations

from typing import Callable

from pyspark_ledger.errors import MetadataError, MetadataExistsError, MetadataVersionConflictError, NoSuchKeyError
from pyspark_ledger.log.log_metadata import STREAMS_ROOT, StreamRecord, decode, encode, stream_key
from pyspark_ledger.metadata.store import MetadataStore, Versioned
from pyspark_ledger.metadata.update_loop import RetryPolicy, update_loop

#: Many writers (Spark tasks, log writers) may change one record at once: more attempts than a ledger's.
STREAM_RETRY = RetryPolicy(attempts=100)
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


class _TransitionConflict(Exception):
    """Carries a MetadataVersionConflictError the transition itself raised (e.g. "another writer added a
    ledger") through the loop, so that it is not taken for the loop's own running out of attempts."""


def update_stream(store: MetadataStore, name: str, transition: Transition,
                  policy: RetryPolicy = STREAM_RETRY) -> tuple[Versioned[StreamRecord], bool]:
    """Apply ``transition`` by CAS until it sticks: (the stored record, whether it changed).

    ``transition`` returning None means "nothing to change"; its exceptions propagate (its
    MetadataVersionConflictError means what it says: the callers retry their whole operation). When
    ``policy``'s attempts run out: MetadataError (too many writers of the record; not a conflict of theirs).
    """
    def compare_and_set(after: StreamRecord, version: int) -> int:
        try:
            return store.set(stream_key(name), encode(after), version)
        except NoSuchKeyError as exc:
            raise NoSuchKeyError(f"stream {name!r} was deleted while it was being changed") from exc

    def transform(record: StreamRecord) -> StreamRecord | None:
        try:
            return transition(record)
        except MetadataVersionConflictError as exc:
            raise _TransitionConflict(exc) from exc

    try:
        updated = update_loop(f"stream {name!r}", lambda: read_stream(store, name), compare_and_set,
                              needs_update=lambda _: True, transform=transform, policy=policy)
    except _TransitionConflict as wrapped:
        raise wrapped.args[0] from None
    except MetadataVersionConflictError as exc:
        raise MetadataError(str(exc)) from exc
    return updated.stored, updated.written


def delete_stream_record(store: MetadataStore, name: str, version: int) -> None:
    """Remove the record (compare-and-set on ``version``); a missing record is fine."""
    try:
        store.delete(stream_key(name), version)
    except NoSuchKeyError:
        return


def list_stream_names(store: MetadataStore) -> list[str]:
    return store.children(STREAMS_ROOT)
