"""Metadata transitions and CAS-conflict resolutions (docs/protocol.md M1-M4, C1, C3, W5, R8)."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import (InternalError, InvalidArgumentError, InvalidConfigurationError, LedgerClosedError,
                                   RecoveryError)
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY, OPEN, Fragment
from pyspark_ledger.protocol.ledger_rules import (
    Decision, check_transition, close_metadata, ensemble_change, mark_in_recovery, new_ledger_metadata,
    recovery_close, resolve_close_conflict, resolve_ensemble_change_conflict, resolve_recovery_close_conflict,
)


def ledger(e=3, qw=3, qa=2):
    return new_ledger_metadata(1, [f"b{i}" for i in range(e)], e, qw, qa, "crc32c", "", {}, 1000)


def test_new_ledger_metadata_is_open_with_one_fragment():
    md = ledger()
    assert md.state == OPEN and md.fragments == (Fragment(0, ("b0", "b1", "b2")),)
    with pytest.raises(InvalidArgumentError, match="twice"):
        new_ledger_metadata(1, ["b0", "b0", "b1"], 3, 3, 2, "crc32c", "", {}, 0)
    with pytest.raises(InvalidConfigurationError, match="ensemble_size >= write_quorum"):
        new_ledger_metadata(1, ["b0", "b1"], 2, 3, 2, "crc32c", "", {}, 0)
    with pytest.raises(InvalidConfigurationError, match="unknown digest type"):
        new_ledger_metadata(1, ["b0"], 1, 1, 1, "md5", "", {}, 0)
    with pytest.raises(InvalidArgumentError, match="ledger id"):
        new_ledger_metadata(-1, ["b0"], 1, 1, 1, "crc32c", "", {}, 0)


def test_ensemble_change_appends_a_fragment_at_the_first_unconfirmed_entry():
    md = ensemble_change(ledger(), {1: "b3"}, 12)
    assert md.fragments == (Fragment(0, ("b0", "b1", "b2")), Fragment(12, ("b0", "b3", "b2")))
    check_transition(ledger(), md)


def test_ensemble_change_at_the_fragment_start_replaces_it_in_place():
    md = ensemble_change(ensemble_change(ledger(), {1: "b3"}, 12), {2: "b4"}, 12)
    assert md.fragments[-1] == Fragment(12, ("b0", "b3", "b4")) and len(md.fragments) == 2


def test_R8_no_fragment_below_the_current_fragment_start():
    md = ensemble_change(ledger(), {1: "b3"}, 12)
    with pytest.raises(InvalidArgumentError, match="below the current fragment's first entry 12"):
        ensemble_change(md, {0: "b4"}, 11)
    with pytest.raises(InvalidArgumentError, match="current fragment starts at entry 12"):
        recovery_close(md.with_changes(state=IN_RECOVERY), 10, 100)
    backwards = md.with_changes(fragments=(md.fragments[0], Fragment(5, ("b0", "b3", "b4"))))
    with pytest.raises(InternalError, match="below the current fragment"):
        check_transition(md, backwards)


def test_the_writer_may_not_change_the_ensemble_unless_open():
    recovering = ledger().with_changes(state=IN_RECOVERY)
    with pytest.raises(LedgerClosedError, match="IN_RECOVERY"):
        ensemble_change(recovering, {0: "b3"}, 0)
    assert ensemble_change(recovering, {0: "b3"}, 0, in_recovery=True).fragments[0].bookies[0] == "b3"
    with pytest.raises(LedgerClosedError):
        ensemble_change(close_metadata(ledger(), -1, 0), {0: "b3"}, 0, in_recovery=True)


def test_W5_resolution_fails_when_the_ledger_is_no_longer_open():
    for stored in (ledger().with_changes(state=IN_RECOVERY), close_metadata(ledger(), 4, 50)):
        resolution = resolve_ensemble_change_conflict(stored, {1: "b1"}, {1: "b3"}, 5)
        assert resolution.decision is Decision.ERROR and stored.state in resolution.reason


def test_ensemble_change_conflict_reapplies_on_the_stored_metadata():
    stored = ledger().with_changes(custom_metadata={"k": b"v"})  # someone else's unrelated change
    resolution = resolve_ensemble_change_conflict(stored, {1: "b1"}, {1: "b3"}, 5)
    assert resolution.decision is Decision.WRITE
    assert resolution.metadata.fragments[-1] == Fragment(5, ("b0", "b3", "b2"))
    assert resolution.metadata.custom_metadata == {"k": b"v"}


def test_ensemble_change_conflict_when_our_change_already_landed():
    landed = ensemble_change(ledger(), {1: "b3"}, 5)
    resolution = resolve_ensemble_change_conflict(landed, {1: "b1"}, {1: "b3"}, 5)
    assert resolution.decision is Decision.SUCCESS and resolution.metadata is landed


def test_ensemble_change_conflict_with_a_taken_replacement_asks_to_choose_again():
    stored = ensemble_change(ledger(), {0: "b3"}, 2)
    resolution = resolve_ensemble_change_conflict(stored, {1: "b1"}, {1: "b3"}, 5)
    assert resolution.decision is Decision.CHOOSE_AGAIN


def test_C1_close_records_last_entry_and_length():
    md = close_metadata(ledger(), 9, 1234)
    assert (md.state, md.last_entry_id, md.length) == (CLOSED, 9, 1234)
    check_transition(ledger(), md)
    with pytest.raises(InvalidArgumentError, match="length"):
        close_metadata(ledger(), -1, 5)


def test_C2_double_close_is_refused_by_the_rule_and_resolved_as_success():
    closed = close_metadata(ledger(), 3, 40)
    with pytest.raises(LedgerClosedError, match="CLOSED"):
        close_metadata(closed, 3, 40)
    assert resolve_close_conflict(closed, 3, 40).decision is Decision.SUCCESS


def test_C3_close_races_a_metadata_change():
    open_changed = ensemble_change(ledger(), {1: "b3"}, 2)
    retry = resolve_close_conflict(open_changed, 3, 40)
    assert retry.decision is Decision.WRITE and retry.metadata.fragments == open_changed.fragments
    assert retry.metadata.state == CLOSED
    assert resolve_close_conflict(close_metadata(ledger(), 3, 40), 3, 40).decision is Decision.SUCCESS
    other = resolve_close_conflict(close_metadata(ledger(), 4, 50), 3, 40)
    assert other.decision is Decision.ERROR and "closed at entry 4" in other.reason
    recovering = resolve_close_conflict(ledger().with_changes(state=IN_RECOVERY), 3, 40)
    assert recovering.decision is Decision.ERROR and "recovered" in recovering.reason


def test_mark_in_recovery_and_recovery_close():
    marked = mark_in_recovery(ledger())
    assert marked.decision is Decision.WRITE and marked.metadata.state == IN_RECOVERY
    again = mark_in_recovery(marked.metadata)
    assert again.decision is Decision.SUCCESS and again.metadata is marked.metadata
    closed = close_metadata(ledger(), 2, 30)
    assert mark_in_recovery(closed).metadata.state == CLOSED
    with pytest.raises(RecoveryError, match="mark it IN_RECOVERY"):
        recovery_close(ledger(), 2, 30)
    done = recovery_close(marked.metadata, 2, 30)
    check_transition(marked.metadata, done)
    assert resolve_recovery_close_conflict(done).decision is Decision.SUCCESS
    assert resolve_recovery_close_conflict(marked.metadata).decision is Decision.ERROR


def test_check_transition_refuses_going_back_and_changing_a_closed_ledger():
    closed = close_metadata(ledger(), 2, 30)
    with pytest.raises(InternalError, match="cannot go back"):
        check_transition(closed, ledger())
    with pytest.raises(InternalError, match="final"):
        check_transition(closed, closed.with_changes(length=31))
    with pytest.raises(InternalError, match="write_quorum"):
        check_transition(ledger(3, 3, 2), ledger(3, 2, 2))


def two_fragments():
    return ensemble_change(ledger(), {1: "b3"}, 12)  # (0: b0 b1 b2), (12: b0 b3 b2)


def test_check_transition_lets_a_repair_replace_a_bookie_of_a_closed_ledger_and_nothing_else():
    closed = close_metadata(two_fragments(), 20, 300)
    repaired = closed.with_changes(fragments=(Fragment(0, ("b0", "b9", "b2")), closed.fragments[1]))
    check_transition(closed, repaired)
    check_transition(closed, closed.with_changes(fragments=(closed.fragments[0], Fragment(12, ("b7", "b3", "b8")))))
    with pytest.raises(InternalError, match="outside its ensemble"):
        check_transition(closed, closed.with_changes(fragments=(Fragment(0, ("b0", "b2", "b1")), closed.fragments[1])))
    with pytest.raises(InternalError, match="final"):
        check_transition(closed, repaired.with_changes(last_entry_id=21))
    with pytest.raises(InternalError, match="final"):
        check_transition(closed, closed.with_changes(fragments=closed.fragments[:1]))
    with pytest.raises(InternalError, match="keep their first entries"):
        check_transition(closed, closed.with_changes(fragments=(closed.fragments[0], Fragment(13, ("b0", "b3", "b2")))))


def test_check_transition_lets_only_a_repair_touch_a_sealed_fragment_of_an_open_ledger():
    md = two_fragments()
    check_transition(md, md.with_changes(fragments=(Fragment(0, ("b0", "b9", "b2")), md.fragments[1])))
    check_transition(md, ensemble_change(md, {0: "b5"}, 12))  # the writer's fragment: replaced in place
    with pytest.raises(InternalError, match="outside its ensemble"):
        check_transition(md, md.with_changes(fragments=(Fragment(0, ("b2", "b1", "b0")), md.fragments[1])))
    with pytest.raises(InternalError, match="twice"):
        check_transition(md, md.with_changes(fragments=(Fragment(0, ("b0", "b8", "b8")), md.fragments[1])))


def test_check_transition_refuses_an_end_before_the_last_fragment():
    md = two_fragments()
    check_transition(md, close_metadata(md, 11, 120))  # the new fragment holds nothing yet: LAC + 1 == 12
    with pytest.raises(InternalError, match="its last fragment starts at entry 12"):
        check_transition(md, md.with_changes(state=CLOSED, last_entry_id=10, length=110))
