"""client/batch_window.py: the unanswered AddBatches of an add stream (docs/protocol.md W10)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_ledger.client.batch_window import (FRAMED_BATCHES_IN_FLIGHT, GRPC_BATCHES_IN_FLIGHT, MAX_BATCHES_IN_FLIGHT,
                                                BatchWindow, batches_in_flight_for, check_batches_in_flight)
from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.errors import InvalidConfigurationError


def test_one_batch_in_flight_holds_the_next_until_its_adds_are_answered():
    window = BatchWindow(1)
    assert window.may_send(False) and not window.full
    window.sent(3, False)
    assert window.full and not window.may_send(False)
    assert not window.answered(2)  # 2 of its 3 adds: still unanswered
    assert window.full
    assert window.answered(1)
    assert not window.full and window.unanswered == 0


def test_the_window_counts_batches_and_answers_count_in_adds():
    window = BatchWindow(2)
    window.sent(1, False)
    assert not window.full
    window.sent(4, False)
    assert window.full
    assert window.answered(1)  # the first batch's one add
    assert not window.full and window.unanswered == 1
    assert not window.answered(3)
    assert window.answered(1) and window.unanswered == 0


def test_a_large_add_is_never_held_and_takes_no_place():
    window = BatchWindow(1)
    window.sent(1, True)
    assert not window.full and window.may_send(False)
    window.sent(1, False)
    assert window.full and window.may_send(True) and not window.may_send(False)
    window.sent(1, True)
    assert not window.answered(1)  # the large add: frees nothing that counted
    assert window.answered(1) and not window.full  # the small batch
    assert not window.answered(1) and window.unanswered == 0  # the second large add


def test_answers_beyond_what_was_sent_count_for_nothing_later():
    window = BatchWindow(1)
    window.sent(1, False)
    assert window.answered(5)  # a bookie answering more than it was sent (a malformed answer)
    window.sent(1, False)
    assert window.full  # not answered in advance by the surplus


def test_empty_batches_and_negative_answers_are_errors():
    window = BatchWindow(1)
    with pytest.raises(ValueError, match="at least one add"):
        window.sent(0, False)
    with pytest.raises(ValueError, match="negative"):
        window.answered(-1)


@pytest.mark.parametrize("value", [0, -1, MAX_BATCHES_IN_FLIGHT + 1, True, 1.5, "2"])
def test_a_window_out_of_range_is_refused_naming_the_limit(value):
    with pytest.raises(InvalidConfigurationError, match=f"add_batches_in_flight must be an integer from 1 to "
                                                        f"{MAX_BATCHES_IN_FLIGHT}"):
        check_batches_in_flight(value)
    with pytest.raises(InvalidConfigurationError, match="add_batches_in_flight"):
        ClientConfig(add_batches_in_flight=value)
    with pytest.raises(InvalidConfigurationError, match="add_batches_in_flight"):
        BatchWindow(value)


def test_by_default_the_window_follows_the_transport():
    """None (the default) is 2 on a framed stream, whose bookie takes the frames one receive brought as one batch,
    and 1 on gRPC, where each message costs the bookie its own pass (docs/protocol.md W10)."""
    assert ClientConfig().add_batches_in_flight is None and check_batches_in_flight(None) is None
    assert (FRAMED_BATCHES_IN_FLIGHT, GRPC_BATCHES_IN_FLIGHT) == (2, 1)
    assert batches_in_flight_for(None, True) == 2 and batches_in_flight_for(None, False) == 1
    assert batches_in_flight_for(1, True) == 1 and batches_in_flight_for(7, False) == 7  # a chosen one is kept
    assert BatchWindow().limit == 1
    with pytest.raises(InvalidConfigurationError, match="needs a limit"):
        BatchWindow(None)
    assert ClientConfig(add_batches_in_flight=MAX_BATCHES_IN_FLIGHT).add_batches_in_flight == MAX_BATCHES_IN_FLIGHT


_op = st.one_of(st.tuples(st.just("send"), st.integers(1, 5), st.booleans()),
                st.tuples(st.just("answer"), st.integers(0, 7), st.just(False)))


@settings(max_examples=400, deadline=None)
@given(limit=st.integers(1, 4), ops=st.lists(_op, max_size=40))
def test_the_window_agrees_with_a_list_of_every_batch(limit, ops):
    """Model: every batch sent, as (first add, last add, large); a batch is answered once the answered count
    reaches its last add; the window is full when `limit` small batches are not."""
    window, batches, sent, answered = BatchWindow(limit), [], 0, 0
    for kind, amount, large in ops:
        if kind == "send":
            if not window.may_send(large):
                assert not large and sum(1 for _, last, big in batches if last > answered and not big) >= limit
                continue
            batches.append((sent + 1, sent + amount, large))
            sent += amount
            window.sent(amount, large)
        else:
            before = [b for b in batches if b[1] > answered and not b[2]]
            answered = min(answered + amount, sent)
            after = [b for b in batches if b[1] > answered and not b[2]]
            assert window.answered(amount) == (len(after) < len(before))
        small_open = sum(1 for _, last, big in batches if last > answered and not big)
        assert window.full == (small_open >= limit)
        assert window.unanswered == sum(1 for _, last, _ in batches if last > answered)
