"""Re-replication over fake bookies: lost copies are rebuilt on a replacement and recorded by CAS."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.errors import (BookieUnavailableError, DataLossError, MetadataVersionConflictError, NotEnoughBookiesError,
                                   UnauthorizedError)
from pyspark_ledger.protocol.schedule import write_set
from tests.client.conftest import PASSWORD


def write_closed(client, count: int, e: int = 3, qw: int = 2, qa: int = 2) -> int:
    with client.create_ledger(e, qw, qa, password=PASSWORD) as writer:
        for index in range(count):
            writer.append(b"entry-%d" % index)
        return writer.ledger_id


def replica_sets(client, ledger_id: int, last: int) -> dict[int, set[str]]:
    md = client.ledger_metadata(ledger_id)
    sets = {}
    for entry_id in range(last + 1):
        ensemble = md.ensemble_for(entry_id)
        sets[entry_id] = {ensemble[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum)}
    return sets


def test_lost_bookie_copies_rebuilt_so_a_second_loss_loses_nothing(client, make_client, cluster):
    ledger_id = write_closed(client, 30)
    lost = client.ledger_metadata(ledger_id).fragments[0].bookies[1]
    cluster.set_down(lost, deregister=True)
    report = client.rereplicate(ledger_id, PASSWORD)
    assert report.lost_bookies == [lost]
    [slot] = report.replaced
    replacement = slot["replacement"]
    assert client.ledger_metadata(ledger_id).fragments[0].bookies[1] == replacement != lost
    held = [entry for entry, bookies in replica_sets(client, ledger_id, 29).items() if replacement in bookies]
    assert slot["entries"] == report.entries_copied == len(held) == 20  # E=3, Qw=2: 2 of every 3 entries
    for entry_id in range(30):
        assert cluster.holders(ledger_id, entry_id) - {lost} == replica_sets(client, ledger_id, 29)[entry_id]
    # A second original bookie dies: every entry still has a copy (without the repair, a third would not).
    second = next(b for b in client.ledger_metadata(ledger_id).fragments[0].bookies if b != replacement)
    cluster.set_down(second, deregister=True)
    reader = make_client(seed=5).open_ledger(ledger_id, PASSWORD, recovery=False)
    assert [e.data for e in reader.read(0, 29)] == [b"entry-%d" % i for i in range(30)]


def test_nothing_to_do_when_every_bookie_is_registered(client, cluster):
    ledger_id = write_closed(client, 5)
    before = client.ledger_metadata(ledger_id)
    report = client.rereplicate(ledger_id, PASSWORD)
    assert (report.lost_bookies, report.replaced, report.entries_copied) == ([], [], 0)
    assert client.ledger_metadata(ledger_id) == before


def test_corrupt_replica_is_skipped_not_spread(client, cluster):
    ledger_id = write_closed(client, 9, e=3, qw=3, qa=2)
    ensemble = client.ledger_metadata(ledger_id).fragments[0].bookies
    lost, first_source = ensemble[0], ensemble[1]
    cluster.corrupt(first_source, ledger_id, 4)
    cluster.set_down(lost, deregister=True)
    report = client.rereplicate(ledger_id, PASSWORD)
    replacement = report.replaced[0]["replacement"]
    assert report.entries_copied == 9
    assert replacement in cluster.holders(ledger_id, 4)
    cluster.set_down(ensemble[2], deregister=True)  # only the corrupt source and the new copy are left
    reader = client.open_ledger(ledger_id, PASSWORD, recovery=False)
    assert reader.read(4, 4).__next__().data == b"entry-4"


@pytest.mark.bookies(5)
def test_entry_with_no_readable_replica_is_data_loss_and_changes_nothing(client, cluster):
    ledger_id = write_closed(client, 6, e=3, qw=2, qa=2)
    before = client.ledger_metadata(ledger_id)
    ensemble = before.fragments[0].bookies
    cluster.set_down(ensemble[0], deregister=True)
    cluster.set_down(ensemble[1], deregister=True)  # entries 0 and 3 were only on these two
    with pytest.raises(DataLossError, match="entry 0 of ledger"):
        client.rereplicate(ledger_id, PASSWORD)
    assert client.ledger_metadata(ledger_id) == before


@pytest.mark.bookies(5)
def test_an_unreachable_survivor_is_asked_again_not_declared_lost(client, make_client, cluster):
    ledger_id = write_closed(client, 6, e=3, qw=2, qa=2)
    before = client.ledger_metadata(ledger_id)
    lost, survivor = before.fragments[0].bookies[0], before.fragments[0].bookies[1]  # entries 0, 3 only there
    cluster.set_down(lost, deregister=True)
    cluster.set_down(survivor)  # e.g. restarting: registered, not reachable yet
    back = threading.Timer(0.5, cluster.set_down, args=(survivor, False))
    back.start()
    try:
        report = client.rereplicate(ledger_id, PASSWORD)
    finally:
        back.join()
    assert report.entries_copied == 4
    cluster.set_down(survivor)
    quick = make_client(seed=3, read_timeout_s=1.0)
    with pytest.raises(BookieUnavailableError, match="run the re-replication again once they are up"):
        quick.rereplicate(ledger_id, PASSWORD, lost_bookies=[report.replaced[0]["replacement"]])


def test_open_ledgers_last_fragment_is_left_to_its_writer(client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    for index in range(5):
        writer.append(b"x%d" % index)
    lost = writer.metadata.fragments[0].bookies[0]
    cluster.set_down(lost, deregister=True)
    report = client.rereplicate(writer.ledger_id, PASSWORD)
    assert (report.replaced, report.skipped_open_fragments) == ([], [0])
    writer.append(b"after")  # the writer replaces the bookie itself
    assert lost not in writer.metadata.fragments[-1].bookies
    writer.close()


def test_wrong_password_and_no_free_bookie_are_refused(client, cluster):
    ledger_id = write_closed(client, 3, e=4, qw=2, qa=2)
    with pytest.raises(UnauthorizedError):
        client.rereplicate(ledger_id, b"wrong")
    cluster.set_down(client.ledger_metadata(ledger_id).fragments[0].bookies[0], deregister=True)
    with pytest.raises(NotEnoughBookiesError, match="start another bookie"):
        client.rereplicate(ledger_id, PASSWORD)


def test_a_concurrent_replacement_of_the_same_slot_fails_the_cas_cleanly(client, store, cluster):
    ledger_id = write_closed(client, 6)
    md = client.ledger_metadata(ledger_id)
    lost = md.fragments[0].bookies[2]
    cluster.set_down(lost, deregister=True)
    spare = next(b for b in cluster.registered if b not in md.fragments[0].bookies)

    def someone_else_repairs(metadata, expected_version):
        remove()  # once
        stored = store.read_ledger(ledger_id)
        fragment = stored.value.fragments[0]
        other = stored.value.with_changes(fragments=(type(fragment)(0, fragment.bookies[:2] + ("elsewhere",)),))
        store.inner.write_ledger(other, stored.version)
    remove = store.before_write(someone_else_repairs)
    with pytest.raises(MetadataVersionConflictError, match="run the re-replication again"):
        client.rereplicate(ledger_id, PASSWORD)
    assert client.ledger_metadata(ledger_id).fragments[0].bookies[2] == "elsewhere"
    assert spare  # the copies written to the spare are harmless: not named in the metadata
