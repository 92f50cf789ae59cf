"""The pure parts of ``ledger demo``: verdict, events, ensemble changes, offsets, report, flags (the killer:
``test_bookie_killer.py``)."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pyarrow as pa
import pytest

from pyspark_ledger.cli.main import main
from pyspark_ledger.demo.bookie_killer import Kill
from pyspark_ledger.demo.events import EVENT_SCHEMA, PAYLOAD_BYTES, event_batch, event_batches, intact_column
from pyspark_ledger.demo.report import summary_lines
from pyspark_ledger.demo.spark_runs import emitted_rows
from pyspark_ledger.demo.stream_layout import ensemble_changes, rewritten_fragment, summarize_ledgers
from pyspark_ledger.demo.summary import DemoSummary
from pyspark_ledger.demo.verify import Tally
from pyspark_ledger.errors import InvalidConfigurationError, LedgerError
from pyspark_ledger.metadata.model import CLOSED, OPEN, Fragment, LedgerMetadata

A, B, C, D = "127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003", "127.0.0.1:1004"


def _tally(expected: int, *chunks) -> Tally:
    tally = Tally(expected)
    for ids, intact in chunks:
        tally.add(np.array(ids, dtype=np.int64), np.array(intact, dtype=bool))
    return tally


def _ledger(ledger_id: int, *fragments, state=OPEN, ctime_ms=0, partition=0, last=-1, length=0) -> LedgerMetadata:
    return LedgerMetadata(ledger_id=ledger_id, ensemble_size=3, write_quorum=3, ack_quorum=2,
                          fragments=tuple(Fragment(first, tuple(bookies)) for first, bookies in fragments),
                          state=state, last_entry_id=last, length=length, ctime_ms=ctime_ms,
                          custom_metadata={"stream": b"s", "partition": str(partition).encode()})


# --- verdict ------------------------------------------------------------------------------


def test_every_id_once_in_any_order_and_chunks_passes():
    verdict = _tally(6, ([5, 0, 3], [True] * 3), ([1, 4, 2], [True] * 3)).verdict()
    assert verdict.passed and verdict.problems() == []
    assert (verdict.rows_read, verdict.distinct_ids, verdict.missing, verdict.duplicates) == (6, 6, 0, 0)


def test_a_duplicate_fails_even_when_the_count_is_made_up_elsewhere():
    verdict = _tally(4, ([0, 1, 2], [True] * 3), ([2], [True])).verdict()
    assert not verdict.passed
    assert (verdict.duplicates, verdict.missing) == (1, 1)
    assert any("more than once" in problem for problem in verdict.problems())


def test_a_missing_id_fails():
    verdict = _tally(5, ([0, 1, 3, 4], [True] * 4)).verdict()
    assert not verdict.passed
    assert verdict.missing == 1 and verdict.duplicates == 0
    assert verdict.problems() == ["1 committed events were not read back (data loss)"]


def test_an_id_the_sink_never_committed_fails():
    verdict = _tally(3, ([0, 1, 2, 3], [True] * 4)).verdict()
    assert not verdict.passed and verdict.unexpected == 1 and verdict.missing == 0


def test_an_altered_row_fails():
    verdict = _tally(3, ([0, 1, 2], [True, False, True])).verdict()
    assert not verdict.passed and verdict.altered == 1


def test_nothing_committed_and_nothing_read_passes_but_a_stray_row_does_not():
    assert _tally(0).verdict().passed
    assert not _tally(0, ([0], [True])).verdict().passed


def test_tally_rejects_bad_input():
    with pytest.raises(ValueError, match="expected_rows"):
        Tally(-1)
    with pytest.raises(ValueError, match="one length"):
        Tally(3).add(np.array([0, 1]), np.array([True]))


# --- events -------------------------------------------------------------------------------


def test_events_follow_from_their_ids():
    batch = event_batch(40, 5, 1_700_000_000_000_000)
    assert batch.schema == EVENT_SCHEMA
    assert batch.column("event_id").to_pylist() == [40, 41, 42, 43, 44]
    assert all(len(payload) == PAYLOAD_BYTES for payload in batch.column("payload").to_pylist())
    again = event_batch(42, 1, 0)
    assert again.column("payload")[0] == batch.column("payload")[2]
    assert again.column("kind")[0] == batch.column("kind")[2]


def test_event_batches_cover_the_range_in_bounded_batches():
    batches = list(event_batches(10, 35, 0, 10))
    assert [b.num_rows for b in batches] == [10, 10, 5]
    assert pa.concat_arrays([b.column("event_id") for b in batches]).to_pylist() == list(range(10, 35))


def _altered_events() -> pa.Table:
    """Events 0..4 with row 0's user, row 1's kind, row 2's payload and row 3's ts altered; row 4 intact."""
    batch = event_batch(0, 5, 1_700_000_000_000_000)
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    columns["user"][0] += 1
    columns["kind"][1] = "nope"
    columns["payload"][2] = columns["payload"][2][:-1] + "x"
    columns["ts"][3] = None
    return pa.Table.from_pydict(columns, schema=EVENT_SCHEMA)


@pytest.mark.spark
def test_the_spark_check_accepts_generated_events_and_flags_each_alteration(spark):
    generated = spark.createDataFrame(pa.Table.from_batches([event_batch(10**9, 50, 0)]))
    assert [row.intact for row in generated.select(intact_column().alias("intact")).collect()] == [True] * 50
    altered = spark.createDataFrame(_altered_events()).orderBy("event_id")
    flags = [row.intact for row in altered.select(intact_column().alias("intact")).collect()]
    assert flags == [False, False, False, False, True]


# --- ensemble changes and layout ----------------------------------------------------------------


def test_ensemble_change_names_replaced_bookie_replacement_and_entry():
    assert ensemble_changes(_ledger(1, (0, [A, B, C]))) == []
    (change,) = ensemble_changes(_ledger(4, (0, [A, B, C]), (17, [A, D, C]), partition=1))
    assert (change.ledger_id, change.partition, change.first_entry_id) == (4, 1, 17)
    assert (change.replaced, change.replacements) == ((B,), (D,))
    assert change.describe({B: "bookie 1", D: "bookie 3"}) == \
        "ledger 4 (partition 1): bookie 1 -> bookie 3 from entry 17"


def test_a_fragment_rewritten_in_place_is_a_change_only_against_what_was_seen():
    # the killer saw ledger 6 from entry 0 on A, B, C; its writer replaced B before confirming any entry
    rewritten = _ledger(6, (0, [A, D, C]), state=CLOSED, last=9, length=100, partition=1)
    change = rewritten_fragment(rewritten, 0, (A, B, C))
    assert (change.first_entry_id, change.replaced, change.replacements, change.in_place) == (0, (B,), (D,), True)
    assert change.describe({B: "bookie 1", D: "bookie 3"}) == (
        "ledger 6 (partition 1): bookie 1 -> bookie 3 from entry 0 (before any entry of it was confirmed: the "
        "fragment was rewritten in place)")
    assert rewritten_fragment(rewritten, 0, (A, D, C)) is None    # unchanged since it was seen
    assert rewritten_fragment(rewritten, 5, (A, B, C)) is None    # no fragment from that entry
    later = _ledger(7, (0, [A, B, C]), (4, [A, D, C]), state=CLOSED, last=9, length=100)
    assert rewritten_fragment(later, 0, (A, B, C)) is None  # a new fragment instead: ensemble_changes has it
    layout = summarize_ledgers("s", 2, [rewritten, later], seen=[(6, 0, (A, B, C)), (7, 0, (A, B, C)), (99, 0, ())])
    assert [(c.ledger_id, c.first_entry_id, c.in_place) for c in layout.changes] == [(6, 0, True), (7, 4, False)]
    assert layout.fragments == 3 and summarize_ledgers("s", 2, [rewritten]).changes == ()


def test_layout_counts_ledgers_fragments_entries_bytes_and_changes():
    ledgers = [_ledger(1, (0, [A, B, C]), state=CLOSED, last=9, length=100),
               _ledger(2, (0, [A, B, C]), (3, [A, B, D]), (6, [D, B, C]), state=CLOSED, last=19, length=250)]
    layout = summarize_ledgers("s", 2, ledgers, orphan_ledgers=1)
    assert (layout.ledgers, layout.fragments, layout.entries, layout.bytes) == (2, 4, 30, 350)
    assert [c.first_entry_id for c in layout.changes] == [3, 6] and layout.orphan_ledgers == 1
    assert json.loads(json.dumps(layout.to_dict()))["changes"][0]["replacements"] == [D]
    assert layout.underreplicated == ()


def test_layout_names_ledgers_whose_sealed_fragments_keep_a_lost_bookie():
    ledgers = [_ledger(1, (0, [A, B, C]), state=CLOSED, last=9, length=100),            # sealed on B
               _ledger(2, (0, [A, B, C]), (3, [A, D, C]), state=CLOSED, last=9, length=100),  # entries 0..2 on B
               _ledger(3, (0, [A, D, C]), state=CLOSED, last=9, length=100)]            # never on B
    assert summarize_ledgers("s", 1, ledgers, lost=[B]).underreplicated == (1, 2)
    assert summarize_ledgers("s", 1, ledgers).underreplicated == ()


# --- offsets of the write query ---------------------------------------------------------------


def test_emitted_rows_reads_the_offset_log_of_a_batch(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"next_id": 1600000, "ts_us": 5}\n')
    assert emitted_rows(str(tmp_path), 3) == 1_600_000
    assert emitted_rows(str(tmp_path), None) == 0
    with pytest.raises(LedgerError, match="batch 4"):
        emitted_rows(str(tmp_path), 4)


# --- report -----------------------------------------------------------------------------------


def _summary(verdict, changes=(), kill=True) -> DemoSummary:
    layout = summarize_ledgers("events-x", 2, [_ledger(1, *changes or [(0, [A, B, C])], state=CLOSED,
                                                       last=9, length=1000)])
    killed = Kill(1, B, 4242, 1, 0, 1, 12.5) if kill else None
    return DemoSummary(verdict=verdict, layout=layout, micro_batches=2, write_s=10.0, read_s=2.0, elapsed_s=30.0,
                       kill=killed, kill_note="" if kill else "none (--no-kill)", bookies=4, bookies_alive=3,
                       bookie_names={A: "bookie 0", B: "bookie 1", C: "bookie 2", D: "bookie 3"})


def test_summary_shows_the_change_and_a_passed_check():
    text = "\n".join(summary_lines(_summary(_tally(2, ([0, 1], [True, True])).verdict(),
                                            changes=[(0, [A, B, C]), (5, [A, D, C])])))
    assert "ledger 1 (partition 0): bookie 1 -> bookie 3 from entry 5" in text
    assert "CHECK PASSED" in text and "NO ensemble change" not in text
    [line] = [line for line in text.splitlines() if line.strip().startswith("under-replicated")]
    assert line.endswith("  none")


def _short_summary(**changes) -> DemoSummary:
    summary = _summary(_tally(2, ([0, 1], [True, True])).verdict())
    layout = summarize_ledgers("events-x", 2, [_ledger(1, (0, [A, B, C]), state=CLOSED, last=9, length=10)],
                               lost=[B])
    return dataclasses.replace(summary, layout=layout, **changes)


def _row(text: str, name: str) -> str:
    [line] = [line for line in text.splitlines() if line.strip().startswith(name)]
    return line


def test_a_removed_cluster_gets_no_repair_command_only_how_to_keep_one():
    text = "\n".join(summary_lines(_short_summary(metadata_uri="sqlite:///tmp/gone/metadata.db")))
    line = _row(text, "under-replicated")
    assert "1 ledger(s) keep sealed entries on the killed bookie" in line
    assert "rereplicate" not in text and "/tmp/gone" not in text, "no command for a cluster that no longer exists"
    assert "the sandbox was removed at exit" in line and "--data-dir DIR" in line
    assert "removed at exit" in _row(text, "files") and "spark.log" not in text


def test_a_kept_cluster_gets_the_commands_to_restart_and_repair_it():
    summary = _short_summary(data_dir="/data/demo cluster", metadata_uri="sqlite:////data/demo cluster/metadata.db",
                             repair_key_file="/data/demo cluster/repair.key",
                             spark_log="/data/demo cluster/demo/spark.log")
    text = "\n".join(summary_lines(summary))
    line = _row(text, "under-replicated")
    assert "`ledger sandbox --data-dir '/data/demo cluster'` restarts the cluster" in line
    assert (f"`ledger --metadata 'sqlite:////data/demo cluster/metadata.db' ledgers rereplicate --all --bookie {B} "
            "--repair-key '/data/demo cluster/repair.key'`") in line
    files = _row(text, "files")
    assert "cluster kept in /data/demo cluster" in files and "spark.log" in files


def test_a_failed_check_in_a_temporary_dir_names_the_kept_spark_log_only():
    summary = _short_summary(spark_log="/tmp/ledger-demo-x/spark.log")
    files = _row("\n".join(summary_lines(summary)), "files")
    assert "Spark's log kept in /tmp/ledger-demo-x/spark.log" in files and "the sandbox was removed" in files


def test_a_cluster_run_speaks_of_the_cluster_it_used_not_of_a_sandbox():
    uri = "zk://10.0.0.11:2181,10.0.0.12:2181/ledger"
    summary = _short_summary(metadata_uri=uri, cluster_file="/tmp/run/cluster.json", min_ack_quorum_zones=2)
    text = "\n".join(summary_lines(summary))
    assert "sandbox" not in text, text
    line = _row(text, "under-replicated")
    assert "restart it on its host (the cluster of /tmp/run/cluster.json keeps running)" in line
    assert f"`ledger --metadata {uri} ledgers rereplicate --all --bookie {B}`" in line
    files = _row(text, "files")
    assert "Spark's log and checkpoints removed at exit" in files and "keeps running" in files
    assert "every ack quorum over 2 zones" in _row(text, "stream")
    failed = _row("\n".join(summary_lines(dataclasses.replace(summary, spark_log="/tmp/d/spark.log"))), "files")
    assert failed.startswith("  files") and "Spark's log kept in /tmp/d/spark.log (the check failed)" in failed
    document = summary.to_dict()
    assert (document["cluster_file"], document["min_ack_quorum_zones"]) == ("/tmp/run/cluster.json", 2)


def test_the_work_dir_message_names_the_sandbox_only_when_there_was_one(tmp_path):
    from pyspark_ledger.demo.job import WorkDir, _remove_unless_kept

    said = []

    class Lines:
        say = said.append

    for own_sandbox in (True, False):
        work = tmp_path / f"work-{own_sandbox}"
        work.mkdir()
        _remove_unless_kept(WorkDir(work, temporary=True, keep=False), Lines, own_sandbox)
        assert not work.exists()
    assert said[0].endswith("(Spark's log and checkpoints) and the sandbox")
    assert said[1].endswith("(Spark's log and checkpoints); the cluster keeps running")


def test_summary_says_plainly_when_no_change_happened_and_when_the_check_failed():
    summary = _summary(_tally(2, ([0, 0], [True, True])).verdict())
    text = "\n".join(summary_lines(summary))
    assert "NO ensemble change happened" in text
    assert "CHECK FAILED" in text and "more than once" in text
    document = summary.to_dict()
    assert document["passed"] is False and document["ensemble_changed"] is False
    assert document["verdict"]["duplicates"] == 1


# --- flags --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, message", [
    (["--bookies", "3"], "must be a whole number >= 4"),
    (["--duration", "0"], "from 5 to 3600"),
    (["--duration", "soon"], "number of seconds"),
    (["--min-ack-quorum-zones", "3"], "must be 1 or 2: the demo's ledgers have an ack quorum of 2"),
])
def test_bad_flags_are_refused_before_anything_starts(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_zone_demand_reaches_the_demos_write_and_is_bounded_by_its_ack_quorum():
    from pyspark_ledger.cli.main import build_parser
    from pyspark_ledger.demo.job import DemoConfig

    assert build_parser().parse_args(["demo", "--min-ack-quorum-zones", "2"]).min_ack_quorum_zones == 2
    assert DemoConfig(min_ack_quorum_zones=2).check().min_ack_quorum_zones == 2
    with pytest.raises(InvalidConfigurationError, match="--min-ack-quorum-zones 3 is out of range: the demo's "
                                                        "ledgers have an ack quorum of 2"):
        DemoConfig(min_ack_quorum_zones=3).check()


def test_json_flag_is_accepted_before_or_after_the_command():
    from pyspark_ledger.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["--json", "demo"]).json is True
    assert parser.parse_args(["demo", "--json"]).json is True
    assert getattr(parser.parse_args(["demo"]), "json", False) is False


# --- the event source's planning and the stop request ----------------------------------------------


def test_a_micro_batch_is_split_into_contiguous_ranges():
    pytest.importorskip("pyspark")
    from pyspark_ledger.demo.event_source import split_range

    ranges = split_range(100, 107, 3, ts_us=5)
    assert [(r.first_id, r.end_id) for r in ranges] == [(100, 102), (102, 104), (104, 107)]
    assert [(r.first_id, r.end_id) for r in split_range(0, 2, 4, ts_us=5)] == [(0, 1), (1, 2)]
    assert split_range(9, 9, 2, ts_us=5) == []


def test_a_signal_is_acted_on_only_at_check_and_a_second_one_at_once():
    import os
    import signal

    from pyspark_ledger.demo.interrupts import StopSignals

    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        stop.check()  # nothing requested: no effect
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            stop.check()
        with pytest.raises(KeyboardInterrupt):  # Python runs the handler right after os.kill returns
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_demo_ignores_client_tls_settings_its_plaintext_sandbox_cannot_use(monkeypatch):
    from pyspark_ledger.client.config import ClientConfig
    from pyspark_ledger.demo.job import _drop_client_tls_env

    monkeypatch.setenv("LEDGER_TLS_CA", "/nonexistent/ca.pem")
    monkeypatch.delenv("LEDGER_TLS_CERT", raising=False)
    monkeypatch.setenv("LEDGER_TLS_KEY", "")
    assert ClientConfig().tls.enabled
    assert _drop_client_tls_env() == ["LEDGER_TLS_CA"]
    assert "LEDGER_TLS_CA" not in os.environ and not ClientConfig().tls.enabled
