"""MetadataStore contract, bookie registrations: SQLite leases and ZooKeeper ephemerals.

The expiry tests use real child processes killed with SIGKILL.
"""
from __future__ import annotations

import os
import signal

import pytest

from pyspark_ledger.errors import InvalidArgumentError, MetadataError, MetadataExistsError
from pyspark_ledger.metadata import BookieRegistration
from tests.metadata.helpers import REGISTER_AND_WAIT, Recorder, start_child, stop_child, wait_until


def test_registration_is_visible_to_other_store_objects(store, open_store):
    store.register_bookie("127.0.0.1:3181", {"port": 3181, "rack": "r1"})
    seen = open_store().bookies()
    assert seen == {"127.0.0.1:3181": BookieRegistration("127.0.0.1:3181", False,
                                                          {"port": 3181, "rack": "r1"})}


def test_read_only_flag_moves_a_bookie_between_the_two_lists(store):
    registration = store.register_bookie("b1", read_only=True)
    store.register_bookie("b2")
    assert store.bookies()["b1"].read_only is True
    assert set(store.bookies(include_read_only=False)) == {"b2"}
    registration.set_read_only(False)
    assert set(store.bookies(include_read_only=False)) == {"b1", "b2"}
    registration.set_read_only(True)
    registration.set_read_only(True)
    assert set(store.bookies()) == {"b1", "b2"}
    assert store.bookies()["b1"].read_only is True


def test_close_removes_the_registration(store, open_store):
    registration = store.register_bookie("b1")
    registration.close()
    registration.close()
    assert "b1" not in open_store().bookies()


def test_closing_the_store_removes_its_registrations(open_store):
    owner, observer = open_store(), open_store()
    owner.register_bookie("b1")
    owner.close()
    assert observer.bookies() == {}


def test_second_live_registration_of_an_id_is_refused(store, open_store, quick):
    store.register_bookie("b1")
    with pytest.raises(MetadataExistsError, match="b1"):
        store.register_bookie("b1")  # same store: refused at once
    with pytest.raises(MetadataExistsError, match="already registered"):
        open_store(**quick).register_bookie("b1")  # another owner: after waiting for expiry
    assert set(store.bookies()) == {"b1"}


def test_killed_process_registration_expires(store, store_uri, quick):
    child = start_child(REGISTER_AND_WAIT, store_uri(**quick), "doomed")
    try:
        wait_until(lambda: "doomed" in store.bookies(), what="the child's registration")
        assert store.bookies()["doomed"].info == {"pid": child.pid}
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        wait_until(lambda: "doomed" not in store.bookies(), timeout=20,
                   what="the killed child's registration to expire")
    finally:
        stop_child(child)


def test_id_of_a_killed_process_can_be_registered_again(store, store_uri, quick):
    child = start_child(REGISTER_AND_WAIT, store_uri(**quick), "reborn")
    try:
        wait_until(lambda: "reborn" in store.bookies(), what="the child's registration")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        store.register_bookie("reborn", {"generation": 2})  # waits for the dead one to expire
        assert store.bookies()["reborn"].info == {"generation": 2}
    finally:
        stop_child(child)


def test_live_registration_is_kept_alive_while_others_wait_for_it(store, open_store, quick):
    store.register_bookie("steady")
    observer = open_store(**quick)
    # Each attempt waits until the first registration is seen renewed (SQLite) or
    # for 1.5 session timeouts (ZooKeeper), then fails: it never expired meanwhile.
    for _ in range(2):
        with pytest.raises(MetadataExistsError):
            observer.register_bookie("steady")
    assert "steady" in observer.bookies()


def test_watch_bookies_reports_join_mode_change_and_leave(store, open_store):
    recorder = Recorder()
    store.watch_bookies(recorder)
    other = open_store()
    registration = other.register_bookie("b1", {"n": 1})
    recorder.wait_for(lambda e: set(e) == {"b1"} and not e["b1"].read_only, "the join")
    registration.set_read_only(True)
    recorder.wait_for(lambda e: set(e) == {"b1"} and e["b1"].read_only, "the mode change")
    registration.close()
    recorder.wait_for(lambda e: e == {}, "the leave")


def test_watch_bookies_reports_a_killed_process_leaving(store, store_uri, quick):
    recorder = Recorder()
    store.watch_bookies(recorder)
    child = start_child(REGISTER_AND_WAIT, store_uri(**quick), "doomed")
    try:
        recorder.wait_for(lambda e: "doomed" in e, "the child joining")
        os.kill(child.pid, signal.SIGKILL)
        # The baseline (no bookies) is never reported, so a latest event without
        # "doomed" after the join can only be the leave.
        wait_until(lambda: "doomed" not in recorder.events[-1], timeout=20,
                   what="the killed child leaving")
    finally:
        stop_child(child)


@pytest.mark.parametrize("bad_id", ["", "a/b", "..", " padded", "tab\tin", None, 42])
def test_bad_bookie_ids_are_rejected(store, bad_id):
    with pytest.raises(InvalidArgumentError, match="bookie id"):
        store.register_bookie(bad_id)


def test_info_must_be_json(store):
    with pytest.raises(InvalidArgumentError, match="JSON"):
        store.register_bookie("b1", {"when": object()})
    assert store.bookies() == {}


def test_closed_registration_cannot_change_mode(store):
    registration = store.register_bookie("b1")
    registration.close()
    with pytest.raises(MetadataError, match="closed"):
        registration.set_read_only(True)


def test_update_info_replaces_what_others_see_and_survives_a_mode_change(store, open_store):
    registration = store.register_bookie("b1", {"port": 3181})
    registration.update_info({"port": 3181, "disk": {"journal": {"free_bytes": 5, "total_bytes": 9}}})
    observer = open_store()
    assert observer.bookies()["b1"].info == {"port": 3181, "disk": {"journal": {"free_bytes": 5, "total_bytes": 9}}}
    registration.set_read_only(True)  # a mode change keeps the updated info (ZooKeeper re-creates the node)
    assert observer.bookies()["b1"] == BookieRegistration("b1", True, {"port": 3181, "disk": {
        "journal": {"free_bytes": 5, "total_bytes": 9}}})
    with pytest.raises(InvalidArgumentError, match="JSON"):
        registration.update_info({"when": object()})
    assert observer.bookies()["b1"].info["port"] == 3181, "a refused update changed nothing"
    registration.close()
    with pytest.raises(MetadataError, match="closed"):
        registration.update_info({"port": 1})
    assert "b1" not in observer.bookies()


def test_zone_and_rack_published_with_the_registration_read_back_from_another_store_object(store, open_store):
    """docs/protocol.md P4: the zone and rack a bookie publishes reach every reader; a registration without
    them (an older bookie) reads as the default zone and rack."""
    from bookie_server.registration import bookie_info
    from pyspark_ledger.metadata.bookie_location import DEFAULT_LOCATION, Location, read_location

    store.register_bookie("127.0.0.1:3181", bookie_info("127.0.0.1", 3181, None, None, "/d",
                                                        location=Location("eu-1", "r7")))
    store.register_bookie("127.0.0.1:3182", {"host": "127.0.0.1", "port": 3182})
    seen = open_store().bookies()
    assert read_location(seen["127.0.0.1:3181"].info) == Location("eu-1", "r7")
    assert read_location(seen["127.0.0.1:3182"].info) == DEFAULT_LOCATION
