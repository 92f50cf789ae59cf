"""Issue 12 part 3: a hundred writer clients at once against three real bookies all write and read back
(before the caps and the on-demand pool, 36 of 100 failed: the 64-thread pool was full of their streams)."""
from __future__ import annotations

import threading

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.bookies import BookieCluster

WRITERS = 100
ENTRIES = 10


def test_a_hundred_writer_clients_all_write_and_read_back(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5&poll_interval=0.1"
    errors: list[str] = []
    written: dict[int, int] = {}
    start, finish = threading.Barrier(WRITERS), threading.Barrier(WRITERS)

    def writer(number: int) -> None:
        try:
            with LedgerClient(uri) as client:
                start.wait(60)  # every client open (one add stream per bookie each) before anyone writes
                with client.create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=2,
                                          password=b"w%d" % number) as ledger:
                    for index in range(ENTRIES):
                        ledger.append(b"writer %d entry %d" % (number, index))
                    written[number] = ledger.ledger_id
                finish.wait(120)  # every client's add streams stay open until all wrote: 100 per bookie at once
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            errors.append(f"writer {number}: {type(exc).__name__}: {exc}")

    with BookieCluster(3, tmp_path / "bookies", uri, checkpoint_interval=0):
        threads = [threading.Thread(target=writer, args=(number,)) for number in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
        assert not errors, f"{len(errors)} of {WRITERS} writers failed: {errors[:5]}"
        assert len(written) == WRITERS
        with LedgerClient(uri) as reader:
            for number, ledger_id in written.items():
                with reader.open_ledger(ledger_id, password=b"w%d" % number) as ledger:
                    assert [entry.data for entry in ledger.read(0, ENTRIES - 1)] == [
                        b"writer %d entry %d" % (number, index) for index in range(ENTRIES)]
