"""Reading one entry from its replicas (docs/protocol.md L5) and the LAC read (L1, L2)."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.protocol.answers import LacAnswer, ReadAnswer
from pyspark_ledger.protocol.reads import LacRead, ReadPlan, ReadStepKind

E4 = ("b0", "b1", "b2", "b3")


def test_replicas_are_in_write_set_order_and_the_first_is_asked_first():
    plan = ReadPlan(2, E4, 3, 2)
    assert plan.replicas == ("b2", "b3", "b0")
    step = plan.first()
    assert (step.kind, step.bookie) == (ReadStepKind.SEND, "b2")


def test_L5_corrupt_replica_is_skipped_and_served_by_the_next():
    plan = ReadPlan(0, E4, 3, 2)
    plan.first()
    step = plan.on_answer("b0", ReadAnswer.unknown("digest mismatch"))
    assert (step.kind, step.bookie) == (ReadStepKind.SEND, "b1")
    done = plan.on_answer("b1", ReadAnswer.present(b"body", 40))
    assert done.kind is ReadStepKind.DONE and done.answer.body == b"body" and done.bookie == "b1"
    assert plan.on_answer("b2", ReadAnswer.no_such_entry()) is done  # final steps repeat


def test_L5_slow_replica_speculative_read_goes_to_the_next_untried():
    plan = ReadPlan(0, E4, 3, 2)
    plan.first()
    assert plan.next_replica_after("b0") == "b1"  # the caller's timer fired
    assert plan.next_replica_after("b1") == "b2"
    assert plan.next_replica_after("b2") is None
    assert plan.on_answer("b1", ReadAnswer.no_such_entry()).kind is ReadStepKind.WAIT
    assert plan.on_answer("b0", ReadAnswer.present(b"x", 1)).kind is ReadStepKind.DONE


def test_no_such_entry_only_after_qw_minus_qa_plus_one_explicit_negatives():
    plan = ReadPlan(0, E4, 3, 2)
    plan.first()
    assert plan.on_answer("b0", ReadAnswer.no_such_entry()).bookie == "b1"
    step = plan.on_answer("b1", ReadAnswer.no_such_ledger())
    assert step.kind is ReadStepKind.NO_SUCH_ENTRY and "b0: no such entry" in step.reason


def test_unknowns_exhausting_the_replicas_fail_rather_than_say_absent():
    plan = ReadPlan(0, E4, 3, 2)
    plan.first()
    plan.on_answer("b0", ReadAnswer.no_such_entry())
    plan.on_answer("b1", ReadAnswer.unknown("timeout"))
    step = plan.on_answer("b2", ReadAnswer.unknown("IO_ERROR"))
    assert step.kind is ReadStepKind.FAILED and "b2: IO_ERROR" in step.reason


def test_answers_from_a_non_replica_are_refused():
    with pytest.raises(InvalidArgumentError, match="not a replica of entry 0"):
        ReadPlan(0, E4, 3, 2).on_answer("b3", ReadAnswer.no_such_entry())


def test_L1_lac_read_waits_for_coverage():
    lac = LacRead(E4, 3, 2)
    assert not lac.record("b0", LacAnswer.ok(5)).done
    assert not lac.record("b2", LacAnswer.ok(7)).done  # {1, 3} could be an unheard ack quorum
    result = lac.record("b1", LacAnswer.ok(3))
    assert result.done and not result.failed and result.last_add_confirmed == 7


def test_L2_no_such_ledger_with_another_bookie_down_never_reports_empty():
    lac = LacRead(("b0", "b1", "b2"), 3, 2)
    assert not lac.record("b0", LacAnswer.no_such_ledger()).done
    assert not lac.record("b1", LacAnswer.unknown("UNAVAILABLE")).done  # waits: not covered
    result = lac.record("b2", LacAnswer.ok(9))  # the bookie holding the data decides
    assert result.done and result.last_add_confirmed == 9


def test_L2_when_too_many_are_down_the_lac_read_fails_instead_of_reporting_empty():
    lac = LacRead(("b0", "b1", "b2"), 3, 2)
    lac.record("b0", LacAnswer.no_such_ledger())
    lac.record("b1", LacAnswer.unknown("UNAVAILABLE"))
    result = lac.record("b2", LacAnswer.unknown("timeout"))
    assert result.done and result.failed and "b1: UNAVAILABLE" in result.reason
    assert lac.record("b2", LacAnswer.ok(9)) is result  # the first verdict sticks


def test_L7_an_answer_in_hand_is_not_slow():
    plan = ReadPlan(0, E4, 3, 2)
    plan.first()
    plan.arrived("b0")  # the caller is verifying b0's answer when b0's timer fires
    assert plan.speculative_replica_after("b0") is None
    assert plan.on_answer("b0", ReadAnswer.unknown("digest mismatch")).bookie == "b1"  # L5: on at once
    assert plan.speculative_replica_after("b0") is None  # b0 answered: its clock stopped
    assert plan.speculative_replica_after("b1") == "b2"  # b1 is silent: slow


def test_L7_the_replicas_still_to_answer_and_no_speculation_once_decided():
    plan = ReadPlan(0, E4, 3, 2)
    plan.first()
    assert plan.unanswered() == ("b0",)
    assert plan.speculative_replica_after("b0") == "b1"
    assert plan.unanswered() == ("b0", "b1")
    plan.arrived("b1")
    assert plan.unanswered() == ("b0",)
    assert plan.speculative_replica_after("b0") is None  # b1's answer is in hand
    assert plan.on_answer("b1", ReadAnswer.present(b"x", 1)).kind is ReadStepKind.DONE
    assert plan.speculative_replica_after("b0") is None and plan.unanswered() == ("b0",)
