"""The Jepsen checker (pyspark_ledger/testing/jepsen/checker.py) on hand-made histories: a clean one passes, and for
each property a history that violates it fails that check (and names the seed and a minimal history)."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.metadata.model import CLOSED, OPEN, Fragment, LedgerMetadata
from pyspark_ledger.testing.jepsen import checker
from pyspark_ledger.testing.jepsen.checker import LedgerOutcome, check, check_exactly_once
from pyspark_ledger.testing.jepsen.history import History, digest

BOOKIES = ("b0", "b1", "b2")


def metadata(ledger_id=1, state=CLOSED, last=-1, fragments=((0, BOOKIES),)) -> LedgerMetadata:
    return LedgerMetadata(ledger_id, 3, 3, 2, tuple(Fragment(first, tuple(b)) for first, b in fragments),
                          state=state, last_entry_id=last)


def written(n: int, ledger_id: int = 1, acked: int | None = None, history: History | None = None):
    """A history in which writer w0 creates ``ledger_id`` and adds n payloads; the first ``acked`` are ok."""
    history = history or History(prefix="t-")
    op = history.invoke("w0", "create")
    history.ok(op, ledger_id=ledger_id)
    payloads = [b"payload %d of %d" % (i, ledger_id) for i in range(n)]
    for entry_id, payload in enumerate(payloads):
        op = history.invoke("w0", "add", ledger_id, payload)
        if acked is None or entry_id < acked:
            history.ok(op, entry_id=entry_id)
        else:
            history.unknown(op, "TimeoutError")
    return history, payloads


def reads(payloads) -> list[tuple[int, str]]:
    return [(entry_id, digest(payload)) for entry_id, payload in enumerate(payloads)]


def outcome(payloads, ledger_id=1, readers=("r1", "r2"), **md) -> dict[int, LedgerOutcome]:
    final = metadata(ledger_id, last=len(payloads) - 1, **md)
    return {ledger_id: LedgerOutcome(ledger_id, final, (metadata(ledger_id, OPEN, -1),),
                                     {reader: reads(payloads) for reader in readers})}


def test_a_clean_history_passes_and_counts():
    history, payloads = written(5, acked=4)
    result = check(history, outcome(payloads))
    assert result.ok, result.report()
    assert result.figures() == {"acknowledged": 4, "lost": 0, "divergent": 0, "ledgers": 1, "failures": 0}


def test_an_unknown_add_may_be_absent():
    history, payloads = written(5, acked=4)
    assert check(history, outcome(payloads[:4])).ok


def test_acknowledged_but_missing_is_lost():
    history, payloads = written(5)
    outcomes = outcome(payloads)
    outcomes[1].reads["r2"][3] = (3, digest(b"other bytes"))
    result = check(history, outcomes)
    assert checker.ACKED in result.failed_checks()
    assert result.lost == 1
    assert "entry 3" in result.report()


def test_acknowledged_past_the_recovered_end_is_divergent():
    history, payloads = written(5)
    result = check(history, outcome(payloads[:3]))  # recovery "truncated" two acknowledged entries
    assert result.failed_checks() == {checker.PAST_END}
    assert result.divergent == 2


def test_readers_that_disagree_fail():
    history, payloads = written(4, acked=2)
    outcomes = outcome(payloads)
    outcomes[1].reads["r2"][3] = (3, digest(payloads[2]))
    result = check(history, outcomes)
    assert checker.AGREE in result.failed_checks()


def test_a_reader_that_stops_short_of_the_end_fails():
    history, payloads = written(4, acked=2)
    outcomes = outcome(payloads)
    outcomes[1].reads["r1"].pop()
    assert checker.AGREE in check(history, outcomes).failed_checks()


def test_acknowledgements_out_of_entry_order_fail():
    history = History(prefix="t-")
    op = history.invoke("w0", "create")
    history.ok(op, ledger_id=1)
    first, second = history.invoke("w0", "add", 1, b"a"), history.invoke("w0", "add", 1, b"b")
    history.ok(second, entry_id=1)
    history.ok(first, entry_id=0)
    result = check(history, outcome([b"a", b"b"]))
    assert result.failed_checks() == {checker.ORDER}


def test_entries_in_another_order_than_added_fail():
    history, payloads = written(3, acked=0)
    swapped = [payloads[1], payloads[0], payloads[2]]
    assert check(history, outcome(swapped)).failed_checks() == {checker.ORDER}


def test_a_payload_nobody_added_fails():
    history, payloads = written(2, acked=0)
    assert check(history, outcome(payloads + [b"phantom"])).failed_checks() == {checker.ORDER}


def test_an_invalid_metadata_change_fails():
    history, payloads = written(3)
    outcomes = outcome(payloads)
    grown = metadata(1, OPEN, -1, fragments=((0, BOOKIES), (2, ("b0", "b1", "b3"))))
    shrunk = metadata(1, OPEN, -1, fragments=((0, BOOKIES), (1, ("b0", "b1", "b4"))))  # below the current fragment
    final = metadata(1, CLOSED, 2, fragments=((0, BOOKIES), (1, ("b0", "b1", "b4"))))
    outcomes[1] = LedgerOutcome(1, final, (metadata(1, OPEN, -1), grown, shrunk), outcomes[1].reads)
    assert check(history, outcomes).failed_checks() == {checker.FRAGMENTS}


def test_an_ensemble_naming_a_bookie_twice_fails():
    history, payloads = written(1)
    outcomes = outcome(payloads)
    final = outcomes[1].final
    object.__setattr__(final, "fragments", (Fragment(0, ("b0", "b0", "b1")),))  # the model would refuse it
    assert checker.FRAGMENTS in check(history, outcomes).failed_checks()


def test_a_ledger_left_open_fails():
    history, payloads = written(2, acked=0)
    outcomes = outcome([])
    outcomes[1] = LedgerOutcome(1, metadata(1, OPEN, -1), (), outcomes[1].reads)
    assert check(history, outcomes).failed_checks() == {checker.CLOSED_CHECK}


def test_a_created_ledger_whose_metadata_is_gone_fails():
    history, _ = written(0)
    assert check(history, {}).failed_checks() == {checker.CLOSED_CHECK}


def test_an_unreadable_ledger_fails():
    history, payloads = written(2, acked=0)
    outcomes = outcome(payloads)
    outcomes[1].reads["r1"] = "RecoveryError: not enough bookies"
    assert checker.CLOSED_CHECK in check(history, outcomes).failed_checks()


def test_exactly_once_sees_duplicates_and_missing_keys():
    assert check_exactly_once(["a", "b"], ["b", "a"]) == []
    failures = check_exactly_once(["a", "b", "c"], ["a", "a", "b", "d"])
    assert [failure.message.split(" expected")[0] for failure in failures] == ["key 'a'", "key 'c'", "key 'd'"]
    assert all(failure.check == checker.EXACTLY_ONCE for failure in failures)


def test_the_report_has_the_seed_the_replay_and_only_the_failing_ledgers_events():
    history, payloads = written(4, ledger_id=1)
    written(4, ledger_id=2, history=history)
    outcomes = {**outcome(payloads[:2], ledger_id=1), **outcome([b"payload %d of 2" % i for i in range(4)], 2)}
    result = check(history, outcomes)
    report = result.report(seed=1234, replay="LEDGER_JEPSEN_SEED=1234 pytest ...")
    assert report.startswith("seed 1234; replay: LEDGER_JEPSEN_SEED=1234")
    history_lines = report.split("minimal history")[1].splitlines()[1:]
    assert history_lines and all(" L1" in line or "invoke  create" in line for line in history_lines)
    assert not any("L1/E0" in line or "L1/E1" in line for line in history_lines)  # entries that did not fail
    assert sum("create" in line for line in history_lines) == 2  # its create's invocation and completion


def test_history_round_trips_through_a_file_and_refuses_nonsense(tmp_path):
    history, _ = written(3, acked=2)
    path = tmp_path / "h.jsonl"
    history.save(path)
    assert list(History.load(path)) == list(history)
    with open(path, "a") as handle:
        handle.write('{"op_id": "torn')  # a killed writer's last line
    assert len(History.load(path)) == len(history)
    with pytest.raises(InvalidArgumentError, match="not invoked"):
        history.ok("nope")
    with pytest.raises(InvalidArgumentError, match="unknown event"):
        history.invoke("w0", "dance")
