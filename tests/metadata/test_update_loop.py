"""The one compare-and-set loop (``metadata.update_loop``): conflicts, exhaustion, no-op, check, back-off."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidConfigurationError, MetadataVersionConflictError, NoSuchKeyError
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.metadata.update_loop import RetryPolicy, update_loop


class Cell:
    """One versioned value; ``interfere`` runs before each compare-and-set (another writer)."""

    def __init__(self, value) -> None:
        self.value, self.version = value, 0
        self.reads = self.writes = 0
        self.interfere = lambda: None

    def read(self) -> Versioned:
        self.reads += 1
        return Versioned(self.value, self.version)

    def put(self, value) -> None:
        self.value, self.version = value, self.version + 1

    def compare_and_set(self, value, expected: int) -> int:
        self.interfere()
        if expected != self.version:
            raise MetadataVersionConflictError(f"version {self.version}, not {expected}")
        self.writes += 1
        self.put(value)
        return self.version


def policy(attempts: int = 5, **overrides) -> tuple[RetryPolicy, list[float]]:
    slept: list[float] = []
    settings = dict(attempts=attempts, backoff_base_s=0.01, backoff_cap_s=0.04, sleep=slept.append,
                    jitter=lambda: 1.0)
    return RetryPolicy(**{**settings, **overrides}), slept


def append(item):
    return lambda value: value + [item]


def once(action):
    """``action`` on the first call only (another writer that wins one race)."""
    pending = [action]
    return lambda: pending and pending.pop()()


def test_a_lost_compare_and_set_reads_again_and_applies_the_change_to_the_new_value():
    cell = Cell(["a"])
    cell.interfere = once(lambda: cell.put(["a", "other"]))
    retry, slept = policy()
    updated = update_loop("cell", cell.read, cell.compare_and_set, needs_update=lambda value: "mine" not in value,
                          transform=append("mine"), policy=retry)
    assert updated.stored == Versioned(["a", "other", "mine"], 2)
    assert (updated.written, updated.attempts, cell.reads, slept) == (True, 2, 2, [0.01])


def test_retries_run_out_with_an_error_naming_the_value_and_the_attempts():
    cell = Cell(0)
    cell.interfere = lambda: cell.put(cell.value + 1)  # someone else always wins
    retry, slept = policy(attempts=4)
    with pytest.raises(MetadataVersionConflictError, match="changing ledger 7 lost 4 compare-and-sets in a row"):
        update_loop("ledger 7", cell.read, cell.compare_and_set, needs_update=lambda value: True,
                    transform=lambda value: value + 100, policy=retry)
    assert (cell.writes, cell.reads, len(slept)) == (0, 4, 3)


def test_no_update_needed_returns_the_stored_value_without_a_write():
    cell = Cell("closed by someone else")
    updated = update_loop("cell", cell.read, cell.compare_and_set, needs_update=lambda value: False,
                          transform=lambda value: pytest.fail("no transform when nothing is needed"))
    assert (updated.stored, updated.written, cell.writes) == (Versioned("closed by someone else", 0), False, 0)


def test_the_value_the_caller_knows_is_used_first_and_a_transform_may_find_nothing_to_do():
    cell = Cell(1)
    known = Versioned(1, 0)
    updated = update_loop("cell", cell.read, cell.compare_and_set, needs_update=lambda value: True,
                          transform=lambda value: None, current=known)
    assert (updated.stored, updated.written, cell.reads, cell.writes) == (known, False, 0, 0)


def test_a_rejected_transition_raises_and_writes_nothing():
    cell = Cell(5)

    def only_upwards(before, after) -> None:
        if after < before:
            raise InvalidConfigurationError(f"cannot go from {before} down to {after}")
    with pytest.raises(InvalidConfigurationError, match="from 5 down to 4"):
        update_loop("cell", cell.read, cell.compare_and_set, needs_update=lambda value: True,
                    transform=lambda value: value - 1, check=only_upwards)
    assert (cell.value, cell.version, cell.writes) == (5, 0, 0)


def test_the_check_runs_again_on_the_value_read_after_a_conflict():
    cell = Cell(5)
    cell.interfere = once(lambda: cell.put(50))
    checked = []

    def check(before, after) -> None:
        checked.append((before, after))
    updated = update_loop("cell", cell.read, cell.compare_and_set, needs_update=lambda value: True,
                          transform=lambda value: value + 1, check=check, policy=policy()[0])
    assert checked == [(5, 6), (50, 51)] and updated.stored == Versioned(51, 2)


def test_errors_other_than_a_conflict_stop_the_loop_at_once():
    cell = Cell(1)

    def gone(value, version):
        raise NoSuchKeyError("deleted meanwhile")
    retry, slept = policy()
    with pytest.raises(NoSuchKeyError):
        update_loop("cell", cell.read, gone, needs_update=lambda value: True, transform=lambda v: v + 1, policy=retry)
    assert slept == [] and cell.reads == 1


def test_back_off_doubles_up_to_its_cap_with_jitter_at_most_halving_it():
    retry, _ = policy()
    assert [retry.delay(n) for n in range(1, 6)] == [0.01, 0.02, 0.04, 0.04, 0.04]
    halved, _ = policy(jitter=lambda: 0.0)
    assert [halved.delay(n) for n in (1, 3, 40, 10_000)] == [0.005, 0.02, 0.02, 0.02]
    cell = Cell(0)
    cell.interfere = lambda: cell.put(cell.value + 1)
    retry, slept = policy(attempts=6)
    with pytest.raises(MetadataVersionConflictError):
        update_loop("cell", cell.read, cell.compare_and_set, needs_update=lambda value: True,
                    transform=lambda value: -1, policy=retry)
    assert slept == [0.01, 0.02, 0.04, 0.04, 0.04]


def test_a_deadline_on_the_injected_clock_stops_the_retries():
    now = [0.0]
    cell = Cell(0)
    cell.interfere = lambda: cell.put(cell.value + 1)
    retry, slept = policy(attempts=1000, deadline_s=0.1, clock=lambda: now[0],
                          sleep=lambda seconds: now.__setitem__(0, now[0] + seconds))
    with pytest.raises(MetadataVersionConflictError, match="within its 0.1 s deadline"):
        update_loop("cell", cell.read, cell.compare_and_set, needs_update=lambda value: True,
                    transform=lambda value: -1, policy=retry)
    assert now[0] <= 0.1 and cell.writes == 0


def test_tries_counts_the_attempts_of_a_whole_operation_and_backs_off_between_them():
    retry, slept = policy(attempts=4)
    assert list(retry.tries()) == [1, 2, 3, 4]
    assert slept == [0.01, 0.02, 0.04]  # before each retry, none before the first attempt
    retry, slept = policy(attempts=4)
    for attempt in retry.tries():
        if attempt == 2:
            break  # the operation succeeded: no pause after it
    assert slept == [0.01]


def test_tries_stops_before_a_pause_that_would_pass_the_deadline():
    now = [0.0]
    retry, _ = policy(attempts=1000, deadline_s=0.05, clock=lambda: now[0],
                      sleep=lambda seconds: now.__setitem__(0, now[0] + seconds))
    assert list(retry.tries()) == [1, 2, 3] and now[0] == pytest.approx(0.03)  # 0.01 + 0.02; next would end at 0.07


@pytest.mark.parametrize("settings, named", [
    (dict(attempts=0), "attempts"), (dict(attempts=True), "attempts"), (dict(backoff_base_s=-1), "backoff_base_s"),
    (dict(backoff_cap_s="1"), "backoff_cap_s"), (dict(backoff_base_s=2.0, backoff_cap_s=1.0), "backoff_cap_s"),
    (dict(deadline_s=0), "deadline_s"),
])
def test_a_bad_policy_is_refused_naming_the_setting(settings, named):
    with pytest.raises(InvalidConfigurationError, match=f"RetryPolicy.{named}"):
        RetryPolicy(**settings)
