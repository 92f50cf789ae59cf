"""bench/paced_tail.py: slow adds grouped into episodes, perf's sync events parsed into intervals, the slowest adds
matched to the bookies' slow journal syncs, and a real paced run (traced where perf and root allow)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench import paced_tail  # noqa: E402


def test_slow_adds_started_close_together_are_one_episode() -> None:
    adds = [(0.000, 0.002), (0.001, 0.003), (0.004, 0.0001), (0.0045, 0.002),  # one episode of 3 slow adds
            (0.100, 0.002),  # alone
            (0.200, 0.0005), (0.201, 0.0005)]  # fast
    assert paced_tail.episodes(adds, slow_s=0.0015) == [3, 1]
    assert paced_tail.episodes(adds, slow_s=0.01) == []


def test_perf_script_lines_become_each_threads_sync_intervals() -> None:
    lines = ["  100/101  5.000100: syscalls:sys_enter_fdatasync: fd: 0x00000007",
             "  200/201  5.000150: syscalls:sys_enter_fsync: fd: 0x00000003",
             "  100/101  5.000400:  syscalls:sys_exit_fdatasync: 0x0",
             "  200/201  5.002150:  syscalls:sys_exit_fsync: 0x0",
             "  100/101  5.000900:  syscalls:sys_exit_fdatasync: 0x0",  # an exit without its entry: skipped
             "garbage", "  x/y 1.0: syscalls:sys_enter_fsync:"]
    assert paced_tail.parse_syncs(lines) == {(100, 101): [(5.0001, 5.0004)], (200, 201): [(5.00015, 5.00215)]}


def test_the_journal_thread_is_the_one_with_most_syncs_and_others_count_apart() -> None:
    syncs = {(1, 10): [(0.0, 0.0002)] * 5, (1, 11): [(0.0, 0.003)], (2, 20): [(0.0, 0.0003)] * 4,
             (9, 90): [(0.0, 0.1)] * 50}  # not a bookie
    assert paced_tail.journal_threads(syncs, {1, 2}) == {1: (1, 10), 2: (2, 20)}
    figures = paced_tail.sync_figures(syncs, {1, 2})
    assert figures["bookie-0 journal"]["calls"] == 5 and figures["bookie-1 journal"]["calls"] == 4
    assert figures["bookies' other threads"] == {"calls": 1, **paced_tail.quantiles_ms([0.003])}


def test_the_slowest_adds_are_matched_to_slow_journal_syncs_in_two_bookies() -> None:
    fast, slow = 0.0003, 0.0012  # journal fdatasync durations
    syncs = {(1, 10): [(1.0, 1.0 + slow), (2.0, 2.0 + fast)] + [(3.0 + i, 3.0 + i + fast) for i in range(10)],
             (2, 20): [(1.0, 1.0 + slow), (2.0, 2.0 + slow)] + [(3.0 + i, 3.0 + i + fast) for i in range(10)],
             (3, 30): [(1.5, 1.5 + slow)] + [(3.0 + i, 3.0 + i + fast) for i in range(11)],
             (3, 31): [(5.0, 5.003)]}  # bookie 3's zeros
    adds = [(0.9995, 0.004),  # both slow syncs of bookies 1 and 2 at 1.0
            (1.9995, 0.003),  # only bookie 2's at 2.0
            (4.999, 0.002)]  # bookie 3's other thread
    adds += [(10.0 + i, 0.0005) for i in range(297)]
    found = paced_tail.stalls(adds, syncs, {1, 2, 3})
    assert found["slowest_1_percent"] == {"adds": 3, "slow_journal_sync_in_2_or_more_bookies": 1,
                                          "slow_journal_sync_in_1_or_more": 2, "another_bookie_thread_syncing": 1}
    assert found["around_the_median"]["adds"] == 150  # the middle half of 300
    assert found["around_the_median"]["slow_journal_sync_in_1_or_more"] == 0


def test_analyse_without_a_trace_reports_latency_and_episodes_only() -> None:
    adds = [(i / 1000, 0.0005 if i % 100 else 0.003) for i in range(1000)]
    result = paced_tail.analyse(adds, 0.0015, None, set())
    assert result["adds"] == 1000 and result["slow_adds"] == 10
    assert result["episodes"] == {"count": 10, "largest": [1] * 10, "median_size": 1}
    assert result["latency_ms"]["p50"] == 0.5 and result["latency_ms"]["max"] == 3.0
    assert "syncs" not in result and "slowest" not in result


def test_a_real_paced_run_untraced_after_the_throughput_runs(tmp_path: Path) -> None:
    result = paced_tail.run(tmp_path, seconds=1.0, rate=200.0, slow_ms=1.5, trace=False, after_throughput=0.5)
    assert result["traced"] is False and result["not_traced_because"] == "--no-trace"
    before = result["after_throughput"]
    assert before["seconds"] == 0.5 and before["1KiB"]["entries_per_s"] > 0 and before["1MiB"]["mb_per_s"] > 0
    assert 50 <= result["adds"] <= 210  # 200 due; a loaded machine may send fewer in the second
    assert 0 < result["latency_ms"]["p50"] <= result["latency_ms"]["p99"] <= result["latency_ms"]["max"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(paced_tail.can_trace() is not None, reason=str(paced_tail.can_trace()))
def test_a_real_paced_run_traced(tmp_path: Path) -> None:
    result = paced_tail.run(tmp_path, seconds=1.0, rate=200.0, slow_ms=1.5)
    assert result["traced"] is True
    journals = [name for name in result["syncs"] if name.endswith("journal")]
    assert len(journals) == 3
    for name in journals:  # each add is fsync'd by its bookie's journal (a group commit may hold several)
        assert result["syncs"][name]["calls"] >= 50
    assert result["slowest"]["slowest_1_percent"]["adds"] >= 1
    assert list(tmp_path.iterdir()) == []


def test_a_negative_throughput_time_is_refused_by_name(capsys) -> None:
    with pytest.raises(SystemExit):
        paced_tail.main(["--after-throughput", "-1"])
    assert "--after-throughput must be 0 (none) or positive, got -1.0" in capsys.readouterr().err
