"""The core decides which bookies a writer fails for silence (docs/protocol.md W2, W7): pure, time given."""
from __future__ import annotations

from pyspark_ledger.protocol.add_timeouts import SilentBookie, UnansweredAdds

TIMEOUT = 2.0


def test_a_bookie_whose_oldest_add_is_older_than_the_timeout_is_silent_and_no_other():
    adds = UnansweredAdds()
    adds.sent_to_all(("a", "b", "c"), 0, now=10.0)
    adds.sent_to_all(("a", "b"), 1, now=11.0)
    adds.of("a").pop(0)  # a answered entry 0; its oldest unanswered add is now entry 1
    adds.of("c").pop(0)
    assert adds.timed_out(12.0, TIMEOUT) == []  # exactly add_timeout_s is not yet too long
    assert adds.timed_out(12.5, TIMEOUT) == [SilentBookie("b", 0, "no answer within 2.0 s")]
    assert adds.timed_out(13.5, TIMEOUT) == [SilentBookie("a", 1, "no answer within 2.0 s"),
                                             SilentBookie("b", 0, "no answer within 2.0 s")]


def test_a_forgotten_bookie_is_never_silent():
    adds = UnansweredAdds()
    adds.sent("a", 5, 0.0)
    adds.forget("a")
    assert adds.timed_out(100.0, TIMEOUT) == [] and adds.of("a") is None and not adds.is_unanswered("a", 5)


def test_a_bookie_still_shedding_at_the_timeout_is_failed_naming_the_shedding_until_it_acks():
    adds = UnansweredAdds()
    adds.sent("a", 0, 1.0)
    adds.shed("a", "too many first adds in flight")
    assert adds.is_unanswered("a", 0)
    assert adds.timed_out(3.5, TIMEOUT) == [
        SilentBookie("a", 0, "TOO_MANY_REQUESTS for 2.0 s (shedding load): too many first adds in flight")]
    adds.acked("a")  # it stored an add: silence now is silence again
    assert adds.timed_out(3.5, TIMEOUT) == [SilentBookie("a", 0, "no answer within 2.0 s")]


def test_the_oldest_add_decides_not_the_newest():
    adds = UnansweredAdds()
    for entry_id in range(5):
        adds.sent("a", entry_id, float(entry_id))
    assert [s.entry_id for s in adds.timed_out(2.5, TIMEOUT)] == [0]
    for entry_id in range(3):
        adds.of("a").pop(entry_id)
    assert [s.entry_id for s in adds.timed_out(5.5, TIMEOUT)] == [3]


def test_sent_many_is_sent_for_each_entry_in_order():
    adds = UnansweredAdds()
    adds.sent_many("a", [3, 4, 5], 1.0)
    adds.sent("a", 6, 2.0)
    adds.sent_many("a", [3], 9.0)  # a re-send keeps its place: the oldest unanswered add is still entry 3
    assert list(adds.of("a").items()) == [(3, 9.0), (4, 1.0), (5, 1.0), (6, 2.0)]
    adds.of("a").pop(3)
    assert adds.timed_out(4.0, TIMEOUT) == [SilentBookie("a", 4, "no answer within 2.0 s")]


def test_a_shed_add_put_back_behind_newer_ones_times_out_from_its_first_send():
    adds = UnansweredAdds()
    adds.sent("a", 1, 0.0)
    adds.sent("a", 2, 1.5)
    first_sent = adds.of("a").pop(1)  # the bookie shed entry 1: its answer took it out
    adds.shed("a", "busy")
    adds.kept_unanswered("a", 1, first_sent)  # waiting for its re-send, behind entry 2 in the dict
    assert adds.timed_out(2.0, TIMEOUT) == []
    assert adds.timed_out(2.5, TIMEOUT) == [SilentBookie("a", 1, "TOO_MANY_REQUESTS for 2.0 s (shedding load): busy")]
    adds.of("a").pop(1)  # answered after all: entry 2 decides again, from its own send
    assert adds.timed_out(3.0, TIMEOUT) == [] and adds.timed_out(3.6, TIMEOUT)[0].entry_id == 2


def test_shed_adds_answered_since_are_let_go_at_the_sweep():
    adds = UnansweredAdds()
    for entry_id in range(50):
        adds.kept_unanswered("a", entry_id, 0.0)
        adds.of("a").pop(entry_id)
    adds.timed_out(1.0, TIMEOUT)
    assert adds._shed_adds["a"] == set()  # remembered only while unanswered: bounded by what is in flight


def test_answered_adds_are_no_longer_awaited_from_that_bookie_only():
    adds = UnansweredAdds()
    adds.sent_to_all(("a", "b"), 0, now=1.0)
    adds.sent_many("a", [1, 2, 3], 2.0)
    adds.answered("a", range(0, 2))  # a run of acks
    adds.answered("a", [3, 9])  # an all-OK batch; 9 was never sent to it
    adds.answered("z", [0])  # a bookie with nothing unanswered: nothing happens
    assert list(adds.of("a")) == [2] and list(adds.of("b")) == [0]
    assert adds.timed_out(4.5, TIMEOUT) == [SilentBookie("a", 2, "no answer within 2.0 s"),
                                            SilentBookie("b", 0, "no answer within 2.0 s")]
