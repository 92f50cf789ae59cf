"""Each ledger metadata change loses a compare-and-set to another client once: how each caller handles it.

The changes all go through ``client.metadata_update.update_ledger`` (one loop,
the transition check included). Here another client writes the ledger in a
real SQLite store just before the caller's compare-and-set (``HookedStore``),
so the caller's write is refused and it re-reads: close (C3), marking
recovery, recovery's close (R3), the writer's ensemble change (W5) and
re-replication (M5) each decide from the stored metadata as docs/protocol.md
says (M4).
"""
from __future__ import annotations

import pytest

from pyspark_ledger.client import rereplicate as rereplicate_module
from pyspark_ledger.client.ensemble_change import change_ensemble
from pyspark_ledger.client.metadata_ops import close_ledger, create_ledger, recovery_close, start_recovery
from pyspark_ledger.client.recovery_op import recover_ledger
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import InternalError, LedgerFencedError, MetadataVersionConflictError
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY
from pyspark_ledger.metadata.update_loop import RetryPolicy
from pyspark_ledger.protocol import ledger_rules
from pyspark_ledger.protocol.add_tracker import EnsembleChangeRequest
from tests.client.conftest import PASSWORD

ENSEMBLE = ("b0", "b1", "b2")


def no_sleep(attempts: int = 5) -> tuple[RetryPolicy, list[float]]:
    slept: list[float] = []
    return RetryPolicy(attempts=attempts, sleep=slept.append), slept


class Race:
    """Before the caller's first compare-and-set, another client writes ``change(stored)`` (or the stored
    value again: only the version moves); every attempted write is kept in ``attempts``."""

    def __init__(self, store, change=None) -> None:
        self.store, self.change = store, change or (lambda stored: stored)
        self.attempts: list[tuple] = []
        self.theirs = None
        self.remove = store.before_write(self._hook)

    def _hook(self, metadata, expected_version) -> None:
        self.attempts.append((metadata, expected_version))
        if self.theirs is None:
            stored = self.store.inner.read_ledger(metadata.ledger_id)
            self.theirs = self.change(stored.value)
            self.store.inner.write_ledger(self.theirs, stored.version)


def new_ledger(store):
    return create_ledger(store, ENSEMBLE, 3, 2, "crc32c", PASSWORD, None, RetryPolicy(attempts=5))


# --- the writer's close ---------------------------------------------------------------------------------


def test_close_after_a_version_only_change_closes_on_the_new_version(store):
    created = new_ledger(store)
    race = Race(store)
    policy, slept = no_sleep()
    closed = close_ledger(store, created, -1, 0, policy)
    assert (closed.value.state, closed.version) == (CLOSED, 2)
    assert [version for _, version in race.attempts] == [0, 1] and len(slept) == 1


def test_close_finding_the_ledger_closed_at_its_own_end_adopts_it_without_writing(store):
    created = new_ledger(store)
    race = Race(store, lambda stored: ledger_rules.close_metadata(stored, -1, 0))
    closed = close_ledger(store, created, -1, 0, no_sleep()[0])
    assert closed.value == race.theirs and closed.version == 1 and len(race.attempts) == 1


def test_close_finding_another_end_or_a_recovery_is_fenced_and_overwrites_nothing(store):
    for change, reason in ((lambda md: md.with_changes(state=IN_RECOVERY), "being recovered"),
                           (lambda md: ledger_rules.close_metadata(md, 4, 40), "closed at entry 4")):
        created = new_ledger(store)
        race = Race(store, change)
        with pytest.raises(LedgerFencedError, match=reason):
            close_ledger(store, created, -1, 0, no_sleep()[0])
        assert store.read_ledger(created.value.ledger_id).value == race.theirs
        race.remove()


# --- recovery ---------------------------------------------------------------------------------------------


def test_marking_recovery_that_another_recoverer_marked_first_proceeds_from_its_metadata(store):
    ledger_id = new_ledger(store).value.ledger_id
    race = Race(store, lambda stored: stored.with_changes(state=IN_RECOVERY))
    marked = start_recovery(store, ledger_id, no_sleep()[0])
    assert (marked.value.state, marked.version) == (IN_RECOVERY, 1) and len(race.attempts) == 1


def test_marking_recovery_of_a_ledger_its_writer_just_closed_returns_the_closed_metadata(store):
    ledger_id = new_ledger(store).value.ledger_id
    Race(store, lambda stored: ledger_rules.close_metadata(stored, 2, 30))
    marked = start_recovery(store, ledger_id, no_sleep()[0])
    assert (marked.value.state, marked.value.last_entry_id, marked.version) == (CLOSED, 2, 1)


def marked_ledger(store):
    return start_recovery(store, new_ledger(store).value.ledger_id, no_sleep()[0])


def test_recovery_close_after_a_version_only_change_still_closes_at_the_recovered_end(store):
    marked = marked_ledger(store)
    race = Race(store)
    closed = recovery_close(store, marked, ledger_rules.recovery_close(marked.value, 5, 50), no_sleep()[0])
    assert (closed.value.state, closed.value.last_entry_id) == (CLOSED, 5) and len(race.attempts) == 2


def test_recovery_close_adopts_the_end_another_recoverer_closed_at(store):
    marked = marked_ledger(store)
    race = Race(store, lambda stored: ledger_rules.recovery_close(stored, 7, 70))
    closed = recovery_close(store, marked, ledger_rules.recovery_close(marked.value, 5, 50), no_sleep()[0])
    assert closed.value == race.theirs and closed.value.last_entry_id == 7 and len(race.attempts) == 1


def test_recovery_close_on_metadata_changed_otherwise_asks_for_recovery_again(store):
    marked = marked_ledger(store)
    Race(store, lambda stored: ledger_rules.ensemble_change(stored, {0: "b9"}, 3, in_recovery=True))
    again = recovery_close(store, marked, ledger_rules.recovery_close(marked.value, 5, 50), no_sleep()[0])
    stored = store.read_ledger(marked.value.ledger_id)
    assert again is None and stored.value.state == IN_RECOVERY and stored.value.fragments[-1].bookies[0] == "b9"


def test_recovery_whose_close_finds_the_metadata_changed_otherwise_runs_again_after_a_pause(client, store, cluster):
    """recover_ledger's rerun loop takes a RetryPolicy: another recoverer's ensemble change lands just before
    this one's close, so recovery runs again from the stored metadata (R3) and closes at the same end."""
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    for index in range(3):
        writer.append(b"entry-%d" % index)
    ledger_id = writer.ledger_id
    spare = sorted(set(cluster.bookies) - set(writer.metadata.current_fragment.bookies))[0]
    theirs = []

    def change_before_the_close(metadata, version) -> None:
        if metadata.state == CLOSED and not theirs:
            stored = store.inner.read_ledger(ledger_id)
            theirs.append(ledger_rules.ensemble_change(stored.value, {0: spare}, 3, in_recovery=True))
            store.inner.write_ledger(theirs[0], stored.version)
    store.before_write(change_before_the_close)
    policy, slept = no_sleep()
    stored = store.read_ledger(ledger_id)
    closed = recover_ledger(client._ctx, stored, master_key(PASSWORD),
                            EntryCodec(stored.value.digest_type, PASSWORD), policy)
    assert (closed.value.state, closed.value.last_entry_id) == (CLOSED, 2) and len(theirs) == 1
    assert len(slept) == 2  # the close's lost compare-and-set, then the pause before the second run
    writer.abort()


# --- the writer's ensemble change --------------------------------------------------------------------------


def change_request(writer):
    ensemble = writer.metadata.current_fragment.bookies
    return EnsembleChangeRequest({1: ensemble[1]}, ensemble, 0)


@pytest.mark.bookies(6)
def test_ensemble_change_after_a_version_only_change_is_applied_on_the_new_version(client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    current = store.read_ledger(writer.ledger_id)
    race = Race(store)
    changed = change_ensemble(client._ctx, current, change_request(writer), set())
    assert changed.version == 2 and len(race.attempts) == 2
    assert changed.value.fragments[0].bookies[1] not in current.value.fragments[0].bookies
    writer.abort()


@pytest.mark.bookies(6)
def test_ensemble_change_of_a_ledger_being_recovered_stops_the_writer(client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    current = store.read_ledger(writer.ledger_id)
    race = Race(store, lambda stored: stored.with_changes(state=IN_RECOVERY))
    with pytest.raises(LedgerFencedError, match="IN_RECOVERY"):
        change_ensemble(client._ctx, current, change_request(writer), set())
    assert store.read_ledger(writer.ledger_id).value == race.theirs and len(race.attempts) == 1
    writer.abort()


@pytest.mark.bookies(6)
def test_ensemble_change_already_made_by_another_client_is_accepted(client, store, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    current = store.read_ledger(writer.ledger_id)
    spares = sorted(set(cluster.bookies) - set(current.value.current_fragment.bookies))

    def same_change_elsewhere(stored):
        ours = race.attempts[0][0].current_fragment.bookies[1]
        return ledger_rules.ensemble_change(stored, {1: next(b for b in spares if b != ours)}, 0)
    race = Race(store, same_change_elsewhere)
    changed = change_ensemble(client._ctx, current, change_request(writer), set())
    assert changed.value == race.theirs and changed.version == 1 and len(race.attempts) == 1
    writer.abort()


@pytest.mark.bookies(6)
def test_ensemble_change_whose_replacement_was_taken_meanwhile_chooses_again(client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    current = store.read_ledger(writer.ledger_id)

    def take_our_replacement(stored):
        ours = race.attempts[0][0].current_fragment.bookies[1]
        return ledger_rules.ensemble_change(stored, {2: ours}, 0)
    race = Race(store, take_our_replacement)
    changed = change_ensemble(client._ctx, current, change_request(writer), set())
    taken = race.theirs.current_fragment.bookies[2]
    bookies = changed.value.current_fragment.bookies
    assert changed.version == 2 and len(race.attempts) == 2
    assert bookies[2] == taken and bookies[1] not in (taken, current.value.current_fragment.bookies[1])
    writer.abort()


# --- re-replication ------------------------------------------------------------------------------------


def closed_with_a_lost_bookie(client, cluster, count: int = 6) -> tuple[int, str]:
    with client.create_ledger(3, 2, 2, password=PASSWORD) as writer:
        for index in range(count):
            writer.append(b"entry-%d" % index)
    lost = client.ledger_metadata(writer.ledger_id).fragments[0].bookies[1]
    cluster.set_down(lost, deregister=True)
    return writer.ledger_id, lost


def test_rereplication_after_a_version_only_change_records_its_replacement_on_the_new_version(client, store,
                                                                                             cluster):
    ledger_id, lost = closed_with_a_lost_bookie(client, cluster)
    race = Race(store)
    report = client.rereplicate(ledger_id, PASSWORD)
    stored = store.read_ledger(ledger_id)
    assert stored.value.fragments[0].bookies[1] == report.replaced[0]["replacement"] != lost
    assert stored.version == race.attempts[-1][1] + 1 and len(race.attempts) == 2


def test_rereplication_runs_the_transition_check(client, store, cluster, monkeypatch):
    ledger_id, lost = closed_with_a_lost_bookie(client, cluster)
    before = store.read_ledger(ledger_id)
    real = rereplicate_module.apply_repairs

    def repairs_and_moves_the_end(metadata, replacements):
        repaired = real(metadata, replacements)
        return repaired.with_changes(last_entry_id=repaired.last_entry_id + 1)
    monkeypatch.setattr(rereplicate_module, "apply_repairs", repairs_and_moves_the_end)
    with pytest.raises(InternalError, match="CLOSED ledger's metadata is final"):
        client.rereplicate(ledger_id, PASSWORD)
    assert store.read_ledger(ledger_id) == before


def test_rereplication_gives_up_when_its_plan_no_longer_fits_and_names_the_remedy(client, store, cluster):
    ledger_id, lost = closed_with_a_lost_bookie(client, cluster)

    def someone_else_repairs(stored):
        fragment = stored.fragments[0]
        bookies = tuple("elsewhere" if bookie == lost else bookie for bookie in fragment.bookies)
        return stored.with_changes(fragments=(type(fragment)(0, bookies),) + stored.fragments[1:])
    race = Race(store, someone_else_repairs)
    with pytest.raises(MetadataVersionConflictError, match="changed while its entries were being copied"):
        client.rereplicate(ledger_id, PASSWORD)
    assert store.read_ledger(ledger_id).value == race.theirs and len(race.attempts) == 1


# --- delete ---------------------------------------------------------------------------------------------


def test_delete_after_the_ledger_changed_checks_the_new_version_and_deletes_it(client, store):
    created = new_ledger(store)
    ledger_id = created.value.ledger_id
    expected, real_delete = [], store.delete_ledger

    def closed_first(target, expected_version=None):
        expected.append(expected_version)
        if len(expected) == 1:
            stored = store.inner.read_ledger(ledger_id)
            store.inner.write_ledger(ledger_rules.close_metadata(stored.value, -1, 0), stored.version)
        return real_delete(target, expected_version)
    store.delete_ledger = closed_first
    client.delete_ledger(ledger_id, PASSWORD)
    assert expected == [0, 1] and ledger_id not in client.list_ledgers()
