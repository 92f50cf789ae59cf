"""The garbage collector's pure decisions, checked against brute-force definitions over small universes."""
from __future__ import annotations

import itertools

import pytest

from bookie_server.config import parse_args
from bookie_server.entry_log_usage import LogUsage
from bookie_server.gc import GarbageCollector
from bookie_server.gc_rules import (ROTATE_MIN_BYTES, LedgerSuspects, deletable_logs, live_fraction,
                                     logs_to_compact, overreplication_scan_due, rotation_due, unnamed_closed)
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY, OPEN, Fragment, LedgerMetadata
from pyspark_ledger.errors import InvalidConfigurationError

# One ledger's view in one pass: (held by the bookie, listed by the metadata store).
VIEWS = list(itertools.product([False, True], repeat=2))


def reference_deletions(history: list[tuple[bool, bool]]) -> list[bool]:
    """Deleted in pass k iff held and unlisted in pass k and in pass k-1, and not deleted in pass k-1."""
    deleted = []
    for k, (held, listed) in enumerate(history):
        absent_now = held and not listed
        absent_before = k > 0 and history[k - 1][0] and not history[k - 1][1]
        deleted.append(absent_now and absent_before and not (k > 0 and deleted[k - 1]))
    return deleted


@pytest.mark.parametrize("passes", [1, 2, 3, 4])
def test_ledger_suspects_match_the_two_pass_rule_for_every_history(passes):
    histories = list(itertools.product(VIEWS, repeat=passes))
    suspects = LedgerSuspects()
    decided: dict[int, list[bool]] = {ledger_id: [] for ledger_id in range(len(histories))}
    for k in range(passes):  # every history is one ledger id, all in the same passes
        local = {ledger_id for ledger_id, history in enumerate(histories) if history[k][0]}
        listed = {ledger_id for ledger_id, history in enumerate(histories) if history[k][1]}
        confirmed = suspects.confirm(local, listed)
        assert confirmed <= local - listed
        for ledger_id in decided:
            decided[ledger_id].append(ledger_id in confirmed)
    for ledger_id, history in enumerate(histories):
        assert decided[ledger_id] == reference_deletions(list(history)), history


def test_a_first_pass_never_deletes_and_a_ledger_seen_again_is_cleared():
    suspects = LedgerSuspects()
    assert suspects.confirm({1, 2, 3}, {3}) == set()
    assert suspects.suspects == {1, 2}
    assert suspects.confirm({1, 2, 3}, {2, 3}) == {1}  # 2 reappeared in the listing (a stale first listing)
    assert suspects.suspects == set()


def test_a_failed_listing_keeps_the_suspects_for_the_next_successful_pass():
    suspects = LedgerSuspects()
    suspects.confirm({5}, set())
    # a failed listing calls nothing: the next successful pass confirms
    assert suspects.confirm({5}, set()) == {5}


def usage(ledgers: dict[int, int], pinned: str | None = None) -> LogUsage:
    return LogUsage(dict(ledgers), pinned)


def test_deletable_logs_against_brute_force():
    ledgers = [1, 2, 3]
    layouts = [frozenset(c) for n in range(3) for c in itertools.combinations(ledgers, n)]
    for gone_set in map(set, itertools.chain.from_iterable(itertools.combinations(ledgers, n) for n in range(4))):
        for logs in itertools.product(layouts, repeat=3):
            maps = {log_id + 1: usage({ledger: 10 for ledger in layout}) for log_id, layout in enumerate(logs)}
            expected = [log_id for log_id, layout in zip((1, 2), logs) if layout <= gone_set]  # log 3 is newest
            assert deletable_logs(maps, gone_set.__contains__) == expected, (gone_set, logs)


def test_the_newest_and_pinned_logs_are_never_deletable():
    maps = {1: usage({}), 2: usage({7: 5}, pinned="damaged at offset 40"), 3: usage({7: 5}), 4: usage({})}
    assert deletable_logs(maps, lambda ledger_id: True) == [1, 3]
    assert deletable_logs({}, lambda ledger_id: True) == []


def test_live_fraction_counts_bytes_of_live_ledgers():
    log = usage({1: 300, 2: 100, 3: 600})
    assert live_fraction(log, {1, 2}.__contains__) == pytest.approx(0.4)
    assert live_fraction(log, set().__contains__) == 0.0
    assert live_fraction(usage({}), set().__contains__) == 1.0  # an empty log has nothing to compact


def test_logs_to_compact_takes_sparse_logs_emptiest_first():
    live = {1}.__contains__
    maps = {
        1: usage({1: 10, 2: 90}),   # 0.10
        2: usage({1: 50, 2: 50}),   # 0.50: above the threshold
        3: usage({2: 100}),         # 0.0: dead, reclaimed rather than compacted
        4: usage({1: 5, 2: 95}),    # 0.05
        5: usage({1: 1, 2: 99}, pinned="damaged"),
        6: usage({1: 1, 2: 99}),    # the newest log
    }
    assert logs_to_compact(maps, live, 0.2) == [4, 1]
    assert logs_to_compact(maps, live, 0.5) == [4, 1]
    assert logs_to_compact(maps, live, 0.51) == [4, 1, 2]
    assert logs_to_compact(maps, live, 0.0) == []


def collected_once_sealed(log: LogUsage, live, threshold: float) -> bool:
    """Whether the sealed-log rules take ``log`` once a newer log exists (what an early seal is for)."""
    maps = {1: log, 2: usage({})}
    return 1 in deletable_logs(maps, lambda ledger_id: not live(ledger_id)) + logs_to_compact(maps, live, threshold)


@pytest.mark.parametrize("threshold", [0.0, 0.2, 0.5, 0.9])
def test_the_current_log_is_sealed_early_exactly_when_the_sealed_log_rules_would_take_it(threshold):
    sizes = [0, 1, 5, 40]  # bytes of each ledger's entries (0: a ledger with empty entries only)
    for layout in itertools.product([None, *sizes], repeat=3):  # None: the ledger has nothing in this log
        log = usage({ledger_id: nbytes for ledger_id, nbytes in enumerate(layout, 1) if nbytes is not None})
        for live_set in map(set, itertools.chain.from_iterable(itertools.combinations([1, 2, 3], n)
                                                               for n in range(4))):
            live = live_set.__contains__
            for min_bytes in (1, 40, 200):
                expected = log.total_bytes >= min_bytes and collected_once_sealed(log, live, threshold)
                assert rotation_due(log, live, threshold, min_bytes) is expected, (layout, live_set, min_bytes)


def test_early_sealing_needs_16_mib_of_entries_and_a_live_share_below_the_threshold():
    assert ROTATE_MIN_BYTES == 16 * 1024 * 1024
    live = {9}.__contains__  # ledger 9 is the only live one
    assert rotation_due(usage({1: ROTATE_MIN_BYTES}), live, 0.2)  # 16 MiB, all deleted
    assert not rotation_due(usage({1: ROTATE_MIN_BYTES - 1}), live, 0.2)  # a byte short: left to grow
    assert not rotation_due(usage({1: 60 << 20}), live, 0.2, min_bytes=64 << 20)
    log = usage({1: 80, 9: 20})
    assert not rotation_due(log, live, 0.2, min_bytes=1)  # 20% live: compaction would not take it
    assert rotation_due(log, live, 0.21, min_bytes=1)
    assert not rotation_due(log, live, 0.0, min_bytes=1)  # no compaction: only a wholly dead log is sealed
    assert rotation_due(usage({1: 100}), live, 0.0, min_bytes=1)
    assert not rotation_due(usage({1: 100}, pinned="damaged at offset 40"), live, 0.2, min_bytes=1)
    assert not rotation_due(None, live, 0.2)  # no current log yet
    assert not rotation_due(usage({}), live, 0.2, min_bytes=0)  # an empty log is never worth sealing


@pytest.mark.parametrize("interval, threshold, flag", [
    (0, 0.2, "--gc-interval"), (-1, 0.2, "--gc-interval"), (float("inf"), 0.2, "--gc-interval"),
    ("300", 0.2, "--gc-interval"), (300, 1.0, "--gc-compaction-threshold"),
    (300, -0.1, "--gc-compaction-threshold"), (300, True, "--gc-compaction-threshold"),
])
def test_bad_collector_settings_name_the_flag(interval, threshold, flag):
    with pytest.raises(InvalidConfigurationError, match=flag):
        GarbageCollector(storage=None, store=None, interval_s=interval, compaction_threshold=threshold)


@pytest.mark.parametrize("wait, bookie_id", [(0, "b"), (-1, "b"), (float("inf"), "b"), ("60", "b"), (True, "b"),
                                             (60, None), (60, "")])
def test_bad_overreplicated_wait_names_the_flag(wait, bookie_id):
    with pytest.raises(InvalidConfigurationError, match="--gc-overreplicated-wait"):
        GarbageCollector(storage=None, store=None, bookie_id=bookie_id, overreplicated_wait_s=wait)


@pytest.mark.parametrize("state, fragments, expected", [
    (CLOSED, [(0, "xyz")], True),                  # re-replicated away from "b"
    (CLOSED, [(0, "bxy"), (5, "xyz")], False),     # an earlier fragment still names it
    (CLOSED, [(0, "xyz"), (5, "xyb")], False),
    (OPEN, [(0, "xyz")], False),                   # an ensemble change may still name it
    (IN_RECOVERY, [(0, "xyz")], False),
])
def test_unnamed_closed_is_a_closed_ledger_naming_the_bookie_nowhere(state, fragments, expected):
    md = LedgerMetadata(1, 3, 3, 2, tuple(Fragment(first, tuple(bookies)) for first, bookies in fragments),
                        state=state, last_entry_id=9 if state == CLOSED else -1)
    assert unnamed_closed(md, "b") is expected


def test_the_flags_default_parse_and_name_themselves_when_bad(tmp_path, capsys):
    base = ["--data-dir", str(tmp_path), "--port", "1", "--metadata", "sqlite:///x.db"]
    config = parse_args(base)
    assert (config.gc_interval_s, config.gc_compaction_threshold) == (300.0, 0.2)
    assert config.gc_overreplicated_wait_s == 86_400.0
    assert parse_args(base + ["--gc-overreplicated-wait", "0"]).gc_overreplicated_wait_s == 0.0  # off
    config = parse_args(base + ["--gc-interval", "0", "--gc-compaction-threshold", "0"])
    assert (config.gc_interval_s, config.gc_compaction_threshold) == (0.0, 0.0)  # both off
    for flag, value in [("--gc-interval", "-1"), ("--gc-interval", "soon"), ("--gc-compaction-threshold", "1"),
                        ("--gc-compaction-threshold", "20%"), ("--gc-overreplicated-wait", "-5"),
                        ("--gc-overreplicated-wait", "a day")]:
        with pytest.raises(SystemExit):
            parse_args(base + [flag, value])
        assert flag in capsys.readouterr().err


@pytest.mark.parametrize("last_scan, now, due", [
    (None, 0.0, True),       # the first pass scans
    (100.0, 100.0, False),
    (100.0, 109.9, False),  # wait 80 s / 8 = 10 s
    (100.0, 110.0, True),
    (100.0, 500.0, True),
])
def test_over_replication_scans_come_at_most_eight_times_per_wait(last_scan, now, due):
    assert overreplication_scan_due(last_scan, now, 80.0) is due
