"""docs/protocol.md B5: a bookie over its disk-usage threshold turns read-only (adds refused, registered read-only) and
writable again below the low-water mark; the rule itself, exhaustively; and the replication client
placing new ensembles on writable bookies only."""
from __future__ import annotations

import itertools

import pytest

from bookie_server.disk_monitor import OVERRIDE_ENV, DiskMonitor, DiskPolicy, read_only_decision
from bookie_server.config import parse_args
from pyspark_ledger.client import BookieStatus, LedgerClient
from pyspark_ledger.entry import master_key
from pyspark_ledger.errors import InvalidConfigurationError, NotEnoughBookiesError

from .conftest import KEY, entry, wait_until

FRACTIONS = [0.0, 0.5, 0.89, 0.9, 0.91, 0.95, 0.951, 0.99, 1.0]


def test_the_rule_has_hysteresis_between_the_low_water_mark_and_the_threshold():
    policy = DiskPolicy(0.95, 0.90)
    for read_only, used in itertools.product([False, True], FRACTIONS):
        expected = used >= 0.90 if read_only else used > 0.95
        assert read_only_decision(policy, read_only, used) is expected, (read_only, used)


def test_a_usage_sequence_flips_only_at_the_marks():
    policy, state, seen = DiskPolicy(0.95, 0.90), False, []
    for used in [0.5, 0.94, 0.96, 0.93, 0.91, 0.89, 0.92, 0.97]:
        state = read_only_decision(policy, state, used)
        seen.append(state)
    assert seen == [False, False, True, True, True, False, False, True]


@pytest.mark.parametrize("threshold, lwm", [(0, 0.5), (1.5, 0.9), (0.9, 0.95), ("0.9", 0.8), (True, 0.5)])
def test_bad_policies_are_refused(threshold, lwm):
    with pytest.raises(InvalidConfigurationError, match="disk usage"):
        DiskPolicy(threshold, lwm)


def test_bad_flags_name_the_flag(tmp_path, capsys):
    base = ["--data-dir", str(tmp_path), "--port", "1", "--metadata", "sqlite:///x.db"]
    with pytest.raises(SystemExit):
        parse_args(base + ["--disk-usage-threshold", "95"])
    assert "--disk-usage-threshold" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(base + ["--disk-usage-threshold", "0.8", "--disk-usage-lwm", "0.9"])
    assert "--disk-usage-lwm" in capsys.readouterr().err


def test_the_monitor_reports_changes_once_and_retries_a_failed_switch(tmp_path):
    usage = iter([0.5, 0.97, 0.98, 0.97, 0.5, 0.5])
    changes, fail_next = [], [False]

    def on_change(read_only: bool, reason: str) -> None:
        if fail_next[0]:
            fail_next[0] = False
            raise RuntimeError("metadata store unreachable")
        changes.append((read_only, reason))

    monitor = DiskMonitor(DiskPolicy(0.95, 0.90), [tmp_path], 60.0, on_change, measure=lambda _: next(usage))
    monitor.check()  # 0.5
    fail_next[0] = True
    monitor.check()  # 0.97: the switch fails, so it is not considered made
    assert monitor.read_only is False and changes == []
    monitor.check()  # 0.98: retried
    monitor.check()  # 0.97: no change
    monitor.check()  # 0.5
    monitor.check()  # 0.5: no change
    assert [read_only for read_only, _ in changes] == [True, False]
    assert "98.0% full" in changes[0][1] and "--disk-usage-threshold" in changes[0][1]


def test_a_disk_freed_before_a_failed_switch_is_retried_still_turns_the_bookie_writable(tmp_path):
    """Found by the Jepsen suite (docs/jepsen.md): ZooKeeper down while the disk filled, so the switch to read-only
    failed half-way (the server already refused adds); the disk was freed before the next check. The monitor must
    still report "writable", or the bookie refuses adds for ever."""
    usage = iter([0.5, 0.97, 0.5, 0.5])
    changes, fail_next = [], [False]

    def on_change(read_only: bool, reason: str) -> None:
        changes.append(read_only)
        if fail_next[0]:
            fail_next[0] = False
            raise RuntimeError("metadata store unreachable")

    monitor = DiskMonitor(DiskPolicy(0.95, 0.90), [tmp_path], 60.0, on_change, measure=lambda _: next(usage))
    monitor.check()  # 0.5
    fail_next[0] = True
    monitor.check()  # 0.97: the switch to read-only fails after the server saw it
    monitor.check()  # 0.5: freed meanwhile: the server is told it is writable
    monitor.check()  # 0.5: settled, no change
    assert changes == [True, False] and monitor.read_only is False


def test_B5_a_full_disk_makes_a_real_bookie_read_only_and_back(make_bookie, metadata_store, metadata_uri,
                                                               client_for, tmp_path):
    usage = {index: tmp_path / f"disk-usage-{index}" for index in range(4)}
    for path in usage.values():
        path.write_text("0.5")
    bookies = [make_bookie(f"bookie-{index}", env={OVERRIDE_ENV: str(usage[index])}, disk_check_interval=0.1).start()
               for index in range(4)]
    with LedgerClient(metadata_uri) as ledgers:
        writer = ledgers.create_ledger(3, 3, 2, password=b"pw")
        assert writer.append(b"before") == 0
        full_id = writer.metadata.current_fragment.bookies[0]
        full = next(index for index, bookie in enumerate(bookies) if bookie.bookie_id == full_id)

        usage[full].write_text("0.97")
        wait_until(lambda: metadata_store.bookies()[full_id].read_only, what="a read-only registration")
        client = client_for(bookies[full])
        assert client.info().read_only is True
        with client.add_stream() as stream:
            refused = stream.add(7, 0, KEY, entry(7, 0)).result(30)
        assert refused.status == BookieStatus.READ_ONLY and "97.0% full" in refused.message
        assert client.read(writer.ledger_id, 0, master_key=master_key(b"pw")).entries[0][0] == 0  # reads go on

        assert writer.append(b"after") == 1  # READ_ONLY is a bookie failure: the ensemble changes
        # Entry 1 may be confirmed by the two others before the READ_ONLY answer arrives: wait for the change.
        fragments = wait_until(lambda: len(ledgers.ledger_metadata(writer.ledger_id).fragments) == 2
                               and ledgers.ledger_metadata(writer.ledger_id).fragments, what="the ensemble change")
        assert full_id not in fragments[-1].bookies
        assert ledgers.bookies(writable_only=True) == sorted(b.bookie_id for b in bookies if b.bookie_id != full_id)
        assert full_id in ledgers.bookies()  # still there for reads
        writer.close()

        for path in usage.values():
            path.write_text("0.99")
        wait_until(lambda: ledgers.bookies(writable_only=True) == [], what="every bookie read-only")
        with pytest.raises(NotEnoughBookiesError):
            ledgers.create_ledger(3, 3, 2, password=b"pw")  # new ensembles need writable bookies

        for path in usage.values():
            path.write_text("0.85")  # below the low-water mark
        wait_until(lambda: len(ledgers.bookies(writable_only=True)) == 4, what="writable again")
        assert client.info().read_only is False
        with ledgers.create_ledger(4, 3, 2, password=b"pw") as again:
            assert again.append(b"writable") == 0
