"""MetadataStore contract, versioned keys and compare-and-set under concurrency."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.errors import (InvalidArgumentError, MetadataError, MetadataExistsError,
                                   MetadataVersionConflictError, NoSuchKeyError)
from pyspark_ledger.metadata.instance import INSTANCE_KEY, read_instance_id
from tests.metadata.helpers import CAS_INCREMENTS, start_child, stop_child


def test_create_get_set_and_versions(store):
    assert store.create("streams/orders", b"v0") == 0
    assert store.get("streams/orders").value == b"v0"
    assert store.set("streams/orders", b"v1", 0) == 1
    assert store.set("streams/orders", b"", 1) == 2
    got = store.get("streams/orders")
    assert (got.value, got.version) == (b"", 2)


def test_create_makes_missing_parents_empty_at_version_0(store):
    store.create("a/b/c", b"leaf")
    assert (store.get("a").value, store.get("a").version) == (b"", 0)
    assert store.get("a/b").value == b""
    store.create("a/b/d", b"sibling")  # existing parents are left alone
    assert store.children("a/b") == ["c", "d"]


def test_create_existing_key_fails_and_keeps_the_value(store):
    store.create("k", b"first")
    with pytest.raises(MetadataExistsError, match="'k'"):
        store.create("k", b"second")
    assert store.get("k").value == b"first"


def test_stale_set_conflicts_and_changes_nothing(store, open_store):
    store.create("k", b"0")
    open_store().set("k", b"1", 0)
    with pytest.raises(MetadataVersionConflictError, match="'k'"):
        store.set("k", b"2", 0)
    assert (store.get("k").value, store.get("k").version) == (b"1", 1)


def test_missing_keys_raise_no_such_key(store):
    with pytest.raises(NoSuchKeyError, match="'nope'"):
        store.get("nope")
    with pytest.raises(NoSuchKeyError):
        store.set("nope", b"x", 0)
    with pytest.raises(NoSuchKeyError):
        store.delete("nope")


def test_delete_checks_the_version_when_given(store):
    store.create("k", b"0")
    store.set("k", b"1", 0)
    with pytest.raises(MetadataVersionConflictError):
        store.delete("k", expected_version=0)
    store.delete("k", expected_version=1)
    with pytest.raises(NoSuchKeyError):
        store.get("k")
    store.create("k", b"again")
    store.delete("k")
    assert store.children("") == [INSTANCE_KEY]  # every store holds its instance id


def test_delete_of_a_key_with_children_is_refused(store):
    store.create("parent/child", b"x")
    with pytest.raises(MetadataError, match="children"):
        store.delete("parent")
    store.delete("parent/child")
    store.delete("parent")
    assert store.children("") == [INSTANCE_KEY]  # every store holds its instance id


def test_children_are_sorted_names_and_empty_when_absent(store):
    for name in ("p-2", "p-10", "p-1", "a"):
        store.create(f"streams/s1/{name}", name.encode())
    store.create("streams/s1/p-1/deeper", b"")
    store.create("other", b"")
    assert store.children("streams/s1") == ["a", "p-1", "p-10", "p-2"]
    assert store.children("") == [INSTANCE_KEY, "other", "streams"]
    assert store.children("streams/missing") == []
    assert store.children("other") == []


@pytest.mark.parametrize("bad_key", ["", "/abs", "trailing/", "a//b", "a/../b", "./a", None, 3])
def test_bad_keys_are_rejected(store, bad_key):
    with pytest.raises(InvalidArgumentError, match="key"):
        store.create(bad_key, b"x")


def test_values_must_be_bytes_within_the_size_limit(store):
    with pytest.raises(InvalidArgumentError, match="bytes"):
        store.create("k", "text")
    with pytest.raises(InvalidArgumentError, match="limit"):
        store.create("k", b"x" * 1_000_001)
    store.create("k", b"x" * 1_000_000)
    assert len(store.get("k").value) == 1_000_000


def _increment(store, key: str, times: int) -> None:
    for _ in range(times):
        while True:
            current = store.get(key)
            try:
                store.set(key, b"%d" % (int(current.value) + 1), current.version)
                break
            except MetadataVersionConflictError:
                continue


def test_concurrent_cas_increments_from_threads_lose_no_update(store, open_store):
    store.create("counter", b"0")
    stores = [store, open_store()]
    threads = [threading.Thread(target=_increment, args=(stores[i % 2], "counter", 25))
               for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    final = store.get("counter")
    assert (final.value, final.version) == (b"100", 100)


def test_concurrent_cas_increments_from_processes_lose_no_update(store, store_uri):
    store.create("counter", b"0")
    children = [start_child(CAS_INCREMENTS, store_uri(), "counter", "30") for _ in range(2)]
    try:
        _increment(store, "counter", 30)
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            assert out.strip() == "done"
    finally:
        for child in children:
            stop_child(child)
    final = store.get("counter")
    assert (final.value, final.version) == (b"90", 90)


def test_a_store_holds_a_random_instance_id_from_its_creation(store):
    instance = read_instance_id(store)
    assert instance is not None and len(instance) == 32
    assert read_instance_id(store) == instance
