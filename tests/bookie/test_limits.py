"""The request-edge checks and budgets of bookie_server.limits, at every boundary."""
from __future__ import annotations

import itertools
import threading

import pytest

from bookie_server import limits
from bookie_server.limits import (MAX_ENTRY_ID, MAX_ENTRY_STEP, MAX_LEDGER_ID, MAX_MASTER_KEY_BYTES, MAX_READ_BYTES,
                                  MAX_READ_ENTRIES, MIN_BODY_BYTES, Budget, add_cost, add_is_plain, check_add,
                                  check_batch, check_read, check_read_lac, check_write_lac, grpc_max_message_bytes,
                                  lac_wait_seconds, read_byte_budget)

MAX_SIZE = 1000
KEY = b"k" * 32
BODY = b"b" * MIN_BODY_BYTES

LEDGERS = {0: None, 1: None, MAX_LEDGER_ID: None, MAX_LEDGER_ID + 1: "ledger id", 2**64 - 1: "ledger id"}
ENTRIES = {0: None, 1: None, MAX_ENTRY_ID: None, MAX_ENTRY_ID + 1: "over this bookie's limit",
           2**40: "over this bookie's limit", 2**62: "over this bookie's limit", 2**63 - 1: "over this bookie's limit",
           -1: "negative", -(2**63): "negative"}
KEYS = {b"": None, b"k": None, b"k" * MAX_MASTER_KEY_BYTES: None,
        b"k" * (MAX_MASTER_KEY_BYTES + 1): f"limit of {MAX_MASTER_KEY_BYTES}"}
BODIES = {b"": "shorter than the smallest", b"x" * (MIN_BODY_BYTES - 1): "shorter than the smallest",
          b"x" * MIN_BODY_BYTES: None, b"x" * MAX_SIZE: None, b"x" * (MAX_SIZE + 1): "--max-entry-size"}


def test_the_accepted_ranges():
    assert MAX_LEDGER_ID == 2**63 - 1
    assert MAX_ENTRY_ID == 2**39 - 1
    assert MIN_BODY_BYTES == 40


def test_check_add_at_every_boundary():
    """Every combination of boundary values: valid only when all four are, and the message names one of the
    problems (a missing key is not one: it is a matter of authorization); the add stream's fast check
    (add_is_plain) agrees with the full check."""
    for ledger_id, entry_id, key, body in itertools.product(LEDGERS, ENTRIES, KEYS, BODIES):
        case = (ledger_id, entry_id, len(key), len(body))
        expected = [words for words in (LEDGERS[ledger_id], ENTRIES[entry_id], KEYS[key], BODIES[body]) if words]
        problem = check_add(ledger_id, entry_id, key, body, MAX_SIZE)
        if not expected:
            assert problem is None, case
        else:
            assert problem is not None and any(words in problem for words in expected), (case, problem)
        # a missing key is no malformation (the add stream answers it UNAUTHORIZED), but it is not plain either
        assert add_is_plain(ledger_id, entry_id, key, body, MAX_SIZE) == (problem is None and bool(key)), case


def test_add_messages_name_the_limit():
    assert str(MAX_ENTRY_ID) in check_add(1, MAX_ENTRY_ID + 1, KEY, BODY, MAX_SIZE)
    assert str(MAX_LEDGER_ID) in check_add(MAX_LEDGER_ID + 1, 0, KEY, BODY, MAX_SIZE)
    assert f"max entry size of {MAX_SIZE}" in check_add(1, 0, KEY, b"x" * (MAX_SIZE + 1), MAX_SIZE)


# add_checks.sort_adds inlines add_is_plain (it runs per entry): tests/bookie/test_add_checks.py holds it to the
# same answers for any add.


@pytest.mark.parametrize("count,limit,refused", [(0, 1, False), (1, 1, False), (2, 1, True),
                                                 (65_536, 65_536, False), (65_537, 65_536, True)])
def test_check_batch(count, limit, refused):
    problem = check_batch(count, limit)
    assert (problem is not None) == refused
    if refused:
        assert str(limit) in problem and "--max-batch-adds" in problem


READ_CASES = [
    # first, last, ledger, key, words in the problem (None = valid)
    (0, 0, 1, b"", None),
    (0, -1, 1, b"", "below first_entry_id"),  # an empty range
    (5, 4, 1, b"", "below first_entry_id"),
    (-1, 0, 1, b"", "negative"),
    (0, -2, 1, b"", "below -1"),
    (MAX_ENTRY_ID, MAX_ENTRY_ID, 1, b"", None),
    (MAX_ENTRY_ID + 1, MAX_ENTRY_ID + 1, 1, b"", "over this bookie's limit"),
    (0, MAX_ENTRY_ID + 1, 1, b"", "over this bookie's limit"),
    (0, MAX_READ_ENTRIES - 1, 1, b"", None),
    (0, MAX_READ_ENTRIES, 1, b"", f"limit of {MAX_READ_ENTRIES} entries per read"),
    (10, 10 + MAX_READ_ENTRIES - 1, 1, b"", None),
    (0, 0, MAX_LEDGER_ID, b"", None),
    (0, 0, MAX_LEDGER_ID + 1, b"", "ledger id"),
    (0, 0, 1, KEY, None),
    (0, 0, 1, b"k" * (MAX_MASTER_KEY_BYTES + 1), f"limit of {MAX_MASTER_KEY_BYTES}"),
]


@pytest.mark.parametrize("first,last,ledger_id,key,words", READ_CASES)
def test_check_read(first, last, ledger_id, key, words):
    problem = check_read(first, last, ledger_id, key)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem, problem


@pytest.mark.parametrize("first,last,step,words", [
    (0, 10, 0, None), (0, 10, 1, None), (3, 23, 5, None), (0, 0, MAX_ENTRY_STEP, None),
    (0, 0, MAX_ENTRY_STEP + 1, f"limit of {MAX_ENTRY_STEP}"),
    (0, 5 * (MAX_READ_ENTRIES - 1), 5, None),  # 65,536 entries, every fifth
    (0, 5 * MAX_READ_ENTRIES, 5, f"65537 entries (0..{5 * MAX_READ_ENTRIES} in steps of 5)"),
    (0, 2 * MAX_READ_ENTRIES, 2, f"limit of {MAX_READ_ENTRIES} entries per read"),
    (4, 3, 5, "below first_entry_id"),
])
def test_check_strided_read(first, last, step, words):
    problem = check_read(first, last, 1, KEY, step)
    assert (problem is None) if words is None else (words in problem), problem


@pytest.mark.parametrize("ledger_id,has_previous,previous,words", [
    (1, False, 0, None), (1, False, -(2**63), None),  # previous_lac is only read in a long poll
    (1, True, -1, None), (1, True, MAX_ENTRY_ID, None), (1, True, -2, "below -1"),
    (1, True, MAX_ENTRY_ID + 1, "over this bookie's limit"), (MAX_LEDGER_ID + 1, False, 0, "ledger id"),
    (MAX_LEDGER_ID, True, 5, None),
])
def test_check_read_lac(ledger_id, has_previous, previous, words):
    problem = check_read_lac(ledger_id, has_previous, previous)
    assert (problem is None) if words is None else (words in problem)


@pytest.mark.parametrize("ledger_id,key,lac,words", [
    (1, KEY, -1, None), (1, KEY, MAX_ENTRY_ID, None), (1, KEY, -2, "below -1"),
    (1, KEY, MAX_ENTRY_ID + 1, "over this bookie's limit"), (1, b"", 3, None),
    (1, b"k" * (MAX_MASTER_KEY_BYTES + 1), 3, f"limit of {MAX_MASTER_KEY_BYTES}"),
    (MAX_LEDGER_ID + 1, KEY, 3, "ledger id"), (0, b"k", 0, None),
])
def test_check_write_lac(ledger_id, key, lac, words):
    problem = check_write_lac(ledger_id, key, lac)
    assert (problem is None) if words is None else (words in problem)


@pytest.mark.parametrize("requested,budget", [(0, MAX_READ_BYTES), (1, 1), (MAX_READ_BYTES, MAX_READ_BYTES),
                                              (MAX_READ_BYTES + 1, MAX_READ_BYTES), (2**64 - 1, MAX_READ_BYTES)])
def test_read_byte_budget_is_capped(requested, budget):
    assert read_byte_budget(requested) == budget


@pytest.mark.parametrize("timeout_ms,seconds", [(0, 0.0), (1500, 1.5), (60_000, 60.0), (60_001, 60.0),
                                                (2**32 - 1, 60.0)])
def test_long_poll_wait_is_capped(timeout_ms, seconds):
    assert lac_wait_seconds(timeout_ms) == seconds


def test_receive_limit_is_near_one_batch_and_fits_the_largest_entry():
    mib = 1024 * 1024
    assert grpc_max_message_bytes(5 * mib, 8 * mib) == 9 * mib
    assert grpc_max_message_bytes(20 * mib, 8 * mib) == 21 * mib  # one entry of the largest size still fits
    assert grpc_max_message_bytes(5 * mib, 4 * mib) >= 5 * mib + 64 * 1024  # an entry with its framing


def test_add_cost_charges_each_add():
    assert add_cost(0, 0) == 0
    assert add_cost(1000, 10) == 1000 + 10 * limits.ADD_OVERHEAD_BYTES


def test_budget_grants_up_to_its_limit_all_or_nothing():
    budget = Budget(10)
    assert budget.try_take(6) and budget.used == 6
    assert not budget.try_take(5) and budget.used == 6  # nothing taken when it does not fit
    assert budget.try_take(4) and budget.used == 10
    assert not budget.try_take(1)
    assert budget.give_back(10) == 0
    assert budget.take_peak() == 10 and budget.peak == 0
    assert budget.try_take(0)


def test_budget_is_thread_safe():
    budget = Budget(1000)
    granted = []

    def worker():
        mine = 0
        for _ in range(2000):
            if budget.try_take(1):
                mine += 1
        granted.append(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 1000 == budget.used
