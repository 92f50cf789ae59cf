"""The benchmarks' own arithmetic and measuring helpers (the runs themselves are too long for tests)."""
from __future__ import annotations

import os
import threading
import time

import pytest

from bench import cpu_usage
from bench import replication as rep
from bench import storage_limit


def test_paced_numbers_come_in_order_and_not_before_their_time():
    started, rate = time.perf_counter(), 200.0
    seen = []
    for number in rep.paced(started, 0.25, rate):
        seen.append((number, time.perf_counter()))
    assert [number for number, _ in seen] == list(range(len(seen)))
    assert 1 <= len(seen) <= 51  # 0..49 due within 0.25 s (50 if the last check came just before the end)
    assert all(at >= started + number / rate - 1e-4 for number, at in seen)


def test_unpaced_numbers_stop_after_the_time_given():
    started = time.perf_counter()
    count = sum(1 for _ in rep.paced(started, 0.05, None))
    assert count >= 1 and time.perf_counter() - started < 1.0


def test_storage_cost_stores_every_entry_durably_and_reports_cpu(tmp_path):
    cost = storage_limit.storage_cost(tmp_path, 1024, 640)
    assert cost["entries"] == 640 and cost["batch"] == 64
    assert cost["cpu_us_per_entry"] > 0 and cost["entries_per_s"] > 0


def test_the_1kib_floor_adds_the_fan_out_and_three_storage_adds():
    result = {"limits": {"1KiB": {"grpc_fanout": {"cpu_us_per_entry": {"client": 30.0, "noop-0": 6.0,
                                                                         "noop-1": 6.0, "noop-2": 8.0}}}},
              "bookie_storage_alone": {"1KiB": {"cpu_us_per_entry": 12.0}}}
    floor = storage_limit.floor_1kib(result)
    assert floor["grpc_fanout_cpu_us_per_entry"] == 50.0
    assert floor["cpu_us_per_entry_before_any_replication_logic"] == 86.0
    assert floor["entries_per_s_if_all_cores_did_only_this"] == round((os.cpu_count() or 1) * 1e6 / 86.0)


def test_three_storages_store_every_entry_durably_at_once_and_remove_their_directories(tmp_path):
    limit = storage_limit.three_storages(tmp_path, 64 * 1024, 12, 4)
    assert limit["entries"] == 12 and limit["storages"] == 3 and limit["inflight_per_storage"] == 4
    assert limit["ack_quorum"] == 2 and limit["mb_per_s"] >= limit["slowest_mb_per_s"] > 0
    assert limit["cpu_us_per_entry_per_storage"] > 0
    assert list(tmp_path.iterdir()) == []


def test_the_1mib_floor_is_the_least_of_the_fan_out_the_three_storages_and_their_cpu():
    mib, cores = 1024 * 1024, os.cpu_count() or 1
    fanout = {"mb_per_s": 300.0, "cpu_us_per_entry": {"client": 2000.0, "noop-0": 500.0, "noop-1": 500.0,
                                                       "noop-2": 1000.0}}
    storages = {"mb_per_s": 150.0, "cpu_us_per_entry_per_storage": 1000.0}
    floor = storage_limit.floor_1mib(fanout, storages, mib)
    cpu_rate = round(cores * 1e6 / 7000.0 * mib / 1e6, 1)  # 4,000 + 3 x 1,000 us per entry
    assert floor["cpu_us_per_entry_before_any_replication_logic"] == 7000.0
    assert floor["parts_mb_per_s"] == {"grpc_fanout": 300.0, "three_storages_one_disk": 150.0,
                                       "cpu_of_both_on_all_cores": cpu_rate}
    assert floor["mb_per_s"] == min(150.0, cpu_rate)
    assert floor["bound_by"] == ("three_storages_one_disk" if 150.0 <= cpu_rate else "cpu_of_both_on_all_cores")
    slow_disk = storage_limit.floor_1mib(fanout, {**storages, "mb_per_s": 20.0}, mib)
    assert (slow_disk["mb_per_s"], slow_disk["bound_by"]) == (20.0, "three_storages_one_disk")
    slow_net = storage_limit.floor_1mib({**fanout, "mb_per_s": 10.0}, storages, mib)
    assert (slow_net["mb_per_s"], slow_net["bound_by"]) == (10.0, "grpc_fanout")


def test_cpu_bound_says_the_rate_the_cpu_allows_and_the_share_of_cores_busy():
    bound = rep.cpu_bound({"cpu_us_per_entry": {"client": 60.0, "bookie-0": 40.0}, "entries_per_s": 5_000})
    cores = os.cpu_count() or 1
    assert bound["cpu_us_per_entry_all_processes"] == 100.0
    assert bound["entries_per_s_if_all_cores_did_only_this"] == round(cores * 1e6 / 100.0)
    assert bound["share_of_all_cores_busy"] == round(100.0 * 5_000 / (cores * 1e6), 2)


def test_the_machines_busy_cpu_only_grows_while_this_process_works():
    before = cpu_usage.machine_busy_seconds()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_usage.machine_busy_seconds() - before >= 0.1


class TestSparkIo:
    @pytest.fixture(scope="class")
    def spark_io(self):
        pytest.importorskip("pyspark.sql.datasource")
        from bench import spark_io
        return spark_io

    def test_figures_report_the_median_run_and_its_share_of_the_cores(self, spark_io):
        runs = [spark_io.Run(3.0, 1.0), spark_io.Run(1.0, 1.8), spark_io.Run(2.0, 3.0)]
        cores = os.cpu_count() or 1
        figures = spark_io.figures(1_000, runs)
        assert figures["seconds"] == 2.0 and figures["rows_per_s"] == 500
        assert figures["machine_cpu_seconds"] == 3.0
        assert figures["share_of_all_cores_busy"] == round(3.0 / (2.0 * cores), 2)
        assert figures["runs"] == [3.0, 1.0, 2.0]
        split = [spark_io.Run(1.0, 2.0, {"jvm": 1.0, "python_workers": 0.5, "rest_of_machine": -0.1}),
                 spark_io.Run(1.0, 2.0, {"jvm": 1.0, "python_workers": -4.0, "rest_of_machine": 6.0})]
        assert spark_io.figures(1_000, split)["own_cpu_seconds_runs"] == [1.5, None]  # a worker's exit broke it

    def test_paths_take_turns_after_their_first_runs_and_the_first_run_stays_out_of_the_median(
            self, spark_io, monkeypatch):
        seconds = iter([9.0, 8.0, 3.0, 5.0, 6.0, 1.0, 2.0, 7.0])
        monkeypatch.setattr(spark_io, "timed",
                            lambda action, groups=None: (action(), spark_io.Run(next(seconds), 4.0))[1])
        calls = []
        timings = spark_io.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3)
        assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # first runs, then rounds starting one later
        timing = timings["a"]
        assert timing.first.seconds == 9.0 and [run.seconds for run in timing.runs] == [3, 1, 2]
        assert timings["b"].first.seconds == 8.0 and [run.seconds for run in timings["b"].runs] == [5, 6, 7]
        figures = spark_io.figures(1_000, timing)
        assert figures["seconds"] == 2.0 and figures["runs"] == [3.0, 1.0, 2.0]
        assert figures["first_run"] == {"seconds": 9.0, "machine_cpu_seconds": 4.0}
        split = spark_io.Timing(spark_io.Run(5.0, 8.0, {"jvm": 6.0, "python_workers": 2.0}),
                                [spark_io.Run(1.0, 2.0, {"jvm": 1.5, "python_workers": 0.5})])
        assert spark_io.figures(1_000, split)["first_run"]["cpu_by_process"] == {"jvm": 6.0, "python_workers": 2.0}
        assert spark_io.figures(1_000, split)["own_cpu_seconds_runs"] == [2.0]

    def test_the_client_read_and_the_bare_fetch_fetch_every_entry_in_child_processes(self, spark_io, tmp_path):
        from bench import bare_fetch
        from pyspark_ledger import LedgerClient
        from pyspark_ledger.sandbox import Sandbox

        with Sandbox(bookies=3, data_dir=tmp_path / "sandbox") as sandbox:
            with LedgerClient(sandbox.metadata_uri) as client:
                spans = []
                for size in (10_000, 40_000):  # answers protobuf encodes, and answers read_wire encodes
                    writer = client.create_ledger(3, 3, 2, password=b"")
                    for index in range(20):
                        writer.append(bytes([index]) * size)
                    writer.close()
                    spans.append(f"{writer.ledger_id}:19")
            read = spark_io.client_read(sandbox, spans, 2)  # bench/client_read.py, as spark_io's runs call it
            fetched = bare_fetch.bare_fetch(sandbox.metadata_uri, spans, 2)
        assert read["entry_bytes"] == 1_000_000 and len(read["runs"]) == 2
        assert set(read["cpu_ms_per_mib"]) == {"client", "bookie-0", "bookie-1", "bookie-2"}
        assert read["cpu_seconds"] >= 0 and read["mib_per_s"] > 0
        # the bare fetch moves the encoded entries: the payloads and each entry's header
        assert fetched["entry_bytes"] > 1_000_000 and len(fetched["runs"]) == len(fetched["cpu_seconds_runs"]) == 2
        assert set(fetched["cpu_ms_per_mib"]) == {"fetcher", "server-0", "server-1", "server-2"}
        assert fetched["cpu_seconds"] == min(fetched["cpu_seconds_runs"]) and fetched["seconds"] == min(fetched["runs"])

    def test_the_limits_are_the_slowest_part_or_all_parts_cpu_on_all_cores(self, spark_io):
        from bench import spark_limits

        def run(seconds, cpu=0.0, runs=None, own=None):
            figures = {"seconds": seconds, "rows_per_s": round(1000 / seconds), "machine_cpu_seconds": cpu}
            return dict(figures, runs=runs, own_cpu_seconds_runs=own) if runs else figures
        memory_read = run(1.0, 9.0, runs=[3.0, 0.8, 1.0], own=[2.5, 2.0, None])  # cheapest: 0.8 s, 2.0 CPU s
        limit = spark_limits.read_limit(1000, memory_read, {"seconds": 0.5, "cpu_seconds": 2.0}, cores=2)
        assert limit["parts_seconds"] == {"in_memory_read": 0.8, "bare_fetch": 0.5,
                                          "cpu_of_all_parts_on_all_cores": 2.0}
        assert limit["seconds"] == 2.0 and limit["bound_by"] == "cpu_of_all_parts_on_all_cores"
        assert limit["rows_per_s"] == 500
        fanout = {"entries_per_s": 100, "cpu_us_per_entry": {"client": 3000.0, "noop-0": 1000.0}}
        storages = [{"entries_per_s": 20, "cpu_us_per_entry_per_storage": 1000.0},
                    {"entries_per_s": 25, "cpu_us_per_entry_per_storage": 900.0}]
        write = spark_limits.write_limit(1000, run(1.5, 2.0), fanout, storages, 100, cores=4)
        assert write["parts_seconds"]["three_storages_one_disk"] == 4.0 and write["bound_by"] == "three_storages_one_disk"
        assert write["cpu_seconds"] == {"in_memory_write": 2.0, "bare_fanout": 0.4, "three_storages": 0.27}
        assert write["parts_seconds"]["bare_fanout"] == 1.0 and write["seconds"] == 4.0
        assert spark_limits.own_cpu({"jvm": 1.0, "python_workers": 0.5, "bookie-0": 0.3, "rest_of_machine": 4}) == 1.5

        results = {"parquet": {"write": run(4.0), "read": run(1.0)},
                   "ledger": {"write": run(5.0), "read": run(2.0), "bookie_bytes_read": 10, "entry_bytes": 10},
                   "arrow_memory": {"read": run(1.0), "read_string": run(1.0), "write": run(2.0)},
                   "limits": {"read": limit, "write": write}}
        ratios = spark_io.ratios(results)
        assert ratios["read_limit_vs_parquet_read"] == 0.5 and ratios["write_limit_vs_parquet_write"] == 1.0
        assert ratios["ledger_read_vs_read_limit"] == 1.0 and ratios["ledger_write_vs_write_limit"] == 1.25
        assert ratios["ledger_write_vs_parquet_write"] == 1.25 and not ratios["write_goal_met"]


def test_striped_reads_summary_and_payloads():
    from bench import striped_reads as striped

    assert striped.summary([3.0, 1.0, 2.0]) == {"median": 2, "min": 1, "max": 3, "runs": [3, 1, 2]}
    assert len(striped.payload(7, 100)) == 100 and striped.payload(7, 100) != striped.payload(8, 100)
    assert striped.BASELINE in striped.LEDGERS and striped.GOAL["ledger"] in striped.LEDGERS


def parser_of_a_script():
    from bench.cli import BenchParser

    parser = BenchParser("Benchmark something.\n\nMore.", quick="short runs")
    parser.number("--seconds", float, 6.0, 1.0, help="length of each run")
    parser.number("--rows", int, 300_000, help="rows read")
    return parser


def test_the_common_arguments_take_their_defaults_from_the_mode():
    parser = parser_of_a_script()
    full, quick = parser.parse_args([]), parser.parse_args(["--quick", "--out", "x/r.json"])
    assert (full.seconds, full.rows, full.out, full.quick) == (6.0, 300_000, None, False)
    assert (quick.seconds, quick.rows, str(quick.out)) == (1.0, 300_000, "x/r.json")
    assert parser.parse_args(["--quick", "--seconds", "2.5"]).seconds == 2.5  # what the user gives wins
    assert parser.description == "Benchmark something."
    assert "(default 300,000)" in parser.format_help() and "(default 6; --quick: 1)" in parser.format_help()


@pytest.mark.parametrize("argv", [["--seconds", "0"], ["--rows", "-3"]])
def test_a_number_that_is_not_positive_is_refused_naming_its_flag(argv, capsys):
    with pytest.raises(SystemExit):
        parser_of_a_script().parse_args(argv)
    assert f"{argv[0]} must be positive, got" in capsys.readouterr().err


def test_drive_writer_counts_every_add_and_refuses_a_run_with_an_add_that_failed(tmp_path):
    from pyspark_ledger.client.config import ClientConfig
    from pyspark_ledger.client.ledger_client import LedgerClient
    from pyspark_ledger.metadata import open_metadata_store
    from pyspark_ledger.testing.fake_bookies import FakeCluster
    cluster = FakeCluster(3)
    store = open_metadata_store(f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2", create=True)
    try:
        with LedgerClient(store, ClientConfig(add_timeout_s=5.0, max_inflight_adds=16),
                          transport=cluster.transport()) as client:
            writer = client.create_ledger(3, 3, 2, password=b"pw")
            with pytest.raises(ValueError, match="max_inflight_adds=20"):  # the writer's own limit is the window
                rep.drive_writer(writer, 64, 0.2, 20)
            run = rep.drive_writer(writer, 64, 0.2, 16)
            assert run["p50_ms"] > 0  # every add timed, none left out
            assert run["entries"] > 0 and writer.last_add_confirmed == run["entries"] - 1
            stopped = client.create_ledger(3, 3, 2, password=b"pw")
            cluster.hold(op="add")  # no answer: every add stays in flight until the writer is aborted
            timer = threading.Timer(1.0, stopped.abort)  # long after the last add was sent
            timer.start()
            with pytest.raises(RuntimeError, match="were not confirmed"):  # each future failed, none raised
                rep.drive_writer(stopped, 64, 0.1, 16, rate=100.0)  # about 10 adds: the window never fills
            timer.join()
    finally:
        store.close()
        cluster.close()


def test_the_fan_outs_credits_never_let_more_than_their_total_out_and_wait_for_all_to_come_back():
    from bench.fanout_limits import Credits
    credits = Credits(5)
    assert credits.take() == 5  # all the room there is
    taken = threading.Event()

    def sender():
        assert credits.take() == 2
        taken.set()
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    assert not taken.wait(0.2)  # no room: it waits
    credits.give(2)
    assert taken.wait(10)
    thread.join(10)
    finished = threading.Event()
    waiter = threading.Thread(target=lambda: (credits.wait_all(1), finished.set()), daemon=True)
    waiter.start()  # all 5 out, 1 of them held unused by the sender: 4 must come back
    credits.give(3)
    assert not finished.wait(0.2)
    credits.give(1)
    assert finished.wait(10)
    waiter.join(10)
