"""The paced-latency limits of bench/replication.py: the paced fsync floor and the bookies' journal figures."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench import bookie_journal, durable_bookies, paced_fsync  # noqa: E402
from bench import replication as rep  # noqa: E402

METRICS_BEFORE = """# HELP bookie_journal_fsync_latency_seconds Journal group-commit fsync time
# TYPE bookie_journal_fsync_latency_seconds histogram
bookie_journal_fsync_latency_seconds_bucket{le="0.001"} 10.0
bookie_journal_fsync_latency_seconds_bucket{le="0.0025"} 10.0
bookie_journal_fsync_latency_seconds_bucket{le="+Inf"} 10.0
bookie_journal_fsync_latency_seconds_count 10.0
bookie_journal_fsync_latency_seconds_sum 0.005
bookie_journal_batch_records_count 10.0
bookie_journal_batch_records_sum 10.0
"""
METRICS_AFTER = """bookie_journal_fsync_latency_seconds_bucket{le="0.001"} 10.0
bookie_journal_fsync_latency_seconds_bucket{le="0.0025"} 110.0
bookie_journal_fsync_latency_seconds_bucket{le="+Inf"} 210.0
bookie_journal_fsync_latency_seconds_count 210.0
bookie_journal_fsync_latency_seconds_sum 0.805
bookie_journal_batch_records_count 210.0
bookie_journal_batch_records_sum 610.0
bookie_add_latency_seconds_bucket{le="0.001"} 0.0
bookie_add_latency_seconds_bucket{le="+Inf"} 0.0
bookie_add_latency_seconds_count 0.0
bookie_add_latency_seconds_sum 0.0
"""


def test_the_paced_floor_makes_every_record_durable_on_two_of_three_files_and_removes_them(tmp_path):
    result = paced_fsync.paced_group_commits(tmp_path, seconds=0.3)
    assert 250 <= result["records"] <= 310  # 1,000/s for 0.3 s
    assert 0 < result["p50_ms_to_copy_2"] <= result["p99_ms_to_copy_2"]
    assert result["records_per_fsync"] >= 1 and result["fsyncs_per_s_per_file"] > 0
    assert "copy 2 of 3" in result["method"]
    assert list(tmp_path.iterdir()) == []


def test_the_paced_floor_refuses_a_quorum_larger_than_the_files(tmp_path):
    with pytest.raises(ValueError, match="quorum must be between 1 and files"):
        paced_fsync.paced_group_commits(tmp_path, files=2, quorum=3, seconds=0.1)


def test_journal_figures_are_the_change_between_two_scrapes():
    before, after = bookie_journal.parse(METRICS_BEFORE), bookie_journal.parse(METRICS_AFTER)
    window = bookie_journal.window(before, after, 2.0)
    assert window["commits_per_s"] == 100.0  # 200 fsyncs in 2 s
    assert window["records_per_commit"] == 3.0
    assert window["fsync_mean_ms"] == 4.0  # 0.8 s over 200
    assert window["fsync_p50_ms"] == 2.5  # the 100th of 200 ends the (1, 2.5] ms bucket
    assert window["fsync_p99_ms"] == 2.5  # in +Inf: the largest finite bound
    assert window["add_batches"] == 0 and window["received_to_durable_mean_ms"] is None


def test_a_quantile_is_interpolated_inside_its_bucket():
    assert bookie_journal.quantile([(1.0, 0.0), (3.0, 10.0), (float("inf"), 10.0)], 0.5) == 2.0
    assert bookie_journal.quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.5) is None


def test_tmpfs_is_told_from_the_mount_table():
    assert not rep.is_tmpfs(Path("/no/such/mount"))
    assert rep.is_tmpfs(Path("/dev/shm")) == any(
        line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in Path("/proc/mounts").read_text().splitlines())


def test_the_preallocated_floor_overwrites_zeros_and_removes_its_files(tmp_path):
    result = paced_fsync.paced_group_commits(tmp_path, files=2, seconds=0.2, preallocated=True)
    assert result["preallocated"] is True and result["p50_ms_to_copy_2"] > 0
    assert list(tmp_path.iterdir()) == []


def test_of_the_durable_fan_out_before_and_after_ours_the_run_with_the_lower_p99_is_kept():
    before = {"p50_ms_to_second_ack": 3.0, "p99_ms_to_second_ack": 90.0, "cpu_us_per_entry": {"client": 500}}
    after = {"p50_ms_to_second_ack": 4.0, "p99_ms_to_second_ack": 12.0, "cpu_us_per_entry": {"client": 600}}
    kept = durable_bookies.lowest_p99([("before ours", before), ("after ours", after)], "when")
    assert kept["p50_ms_to_second_ack"] == 4.0 and kept["p99_ms_to_second_ack"] == 12.0  # one run's figures
    assert kept["cpu_us_per_entry"] == {"client": 600}
    assert kept["runs"] == [{"when": "before ours", "p50_ms_to_second_ack": 3.0, "p99_ms_to_second_ack": 90.0},
                            {"when": "after ours", "p50_ms_to_second_ack": 4.0, "p99_ms_to_second_ack": 12.0}]


def test_of_labelled_runs_of_a_paced_limit_the_lowest_p99_is_kept_with_every_run_under_its_label():
    runs = [("a", {"p50_ms_to_second_ack": 1.0, "p99_ms_to_second_ack": 9.0, "cpu_us_per_entry": {"client": 1}}),
            ("b", {"p50_ms_to_second_ack": 2.0, "p99_ms_to_second_ack": 3.0, "cpu_us_per_entry": {"client": 2}}),
            ("c", {"p50_ms_to_second_ack": 0.5, "p99_ms_to_second_ack": 5.0, "cpu_us_per_entry": {"client": 3}})]
    kept = durable_bookies.lowest_p99(runs, "mode")
    figures = (kept["p50_ms_to_second_ack"], kept["p99_ms_to_second_ack"], kept["cpu_us_per_entry"])
    assert figures == (2.0, 3.0, {"client": 2})
    assert [run["mode"] for run in kept["runs"]] == ["a", "b", "c"]
    assert kept["runs"][0] == {"mode": "a", "p50_ms_to_second_ack": 1.0, "p99_ms_to_second_ack": 9.0}
    assert "3" in kept["kept"]


@pytest.fixture
def windows(monkeypatch) -> list:
    """The ``max_batches_in_flight`` of every ``GrpcTransport`` the fan-out limits open, in order (the transports
    are real)."""
    import fanout_limits

    opened = []
    real = fanout_limits.GrpcTransport.__init__

    def recording(self, *args, **kwargs):
        opened.append(kwargs.get("max_batches_in_flight"))
        real(self, *args, **kwargs)
    monkeypatch.setattr(fanout_limits.GrpcTransport, "__init__", recording)
    return opened


def test_the_paced_bare_fan_out_runs_with_and_without_ours_window_and_keeps_the_lower_p99(tmp_path, windows):
    """Both ways a stream sends small adds, through the real transport to real no-op servers; the window each run
    used reaches the transport."""
    import fanout_limits
    from bench.noop_bookies import start_noop_servers

    servers = start_noop_servers(3)
    try:
        result = fanout_limits.paced_fanout_limit([port for _, port in servers], tmp_path, 0.5)
    finally:
        for process, _ in servers:
            process.kill()
            process.wait(10)
    assert windows == [window for _, window in fanout_limits.PACED_FANOUT_MODES]
    assert windows == [fanout_limits.UNHELD, None]  # None: ours' default, the window the stream's transport takes
    modes = {run["mode"]: run["p99_ms_to_second_ack"] for run in result["runs"]}
    assert list(modes) == [mode for mode, _ in fanout_limits.PACED_FANOUT_MODES]
    assert result["p99_ms_to_second_ack"] == min(modes.values()) > 0
    assert result["entries_per_s"] > 0 and "the better of" in result["method"]


def test_the_durable_fan_out_runs_each_way_on_real_durable_servers_labelled_by_when_and_mode(tmp_path, windows):
    import fanout_limits

    runs = fanout_limits.durable_fanout_runs(tmp_path, 0.4, "before ours")
    assert windows == [fanout_limits.UNHELD, None]  # None: ours' default, the window the stream's transport takes
    assert [label for label, _ in runs] == [f"before ours, {mode}" for mode, _ in fanout_limits.PACED_FANOUT_MODES]
    assert all(run["p99_ms_to_second_ack"] > 0 and run["method"] == fanout_limits.DURABLE_METHOD for _, run in runs)
    assert all(path.name.startswith("noop-metadata") for path in tmp_path.iterdir())  # the servers' files are gone
    for _, run in runs:  # over the framed add ports, as ours (docs/protocol.md W11), never gRPC
        assert all(figures["framed_streams"] >= 1 and figures["grpc_streams"] == 0
                   for figures in run["group_commits"].values()), run["group_commits"]
