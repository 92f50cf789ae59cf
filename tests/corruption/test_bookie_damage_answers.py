"""A real bookie process with damaged files: a damaged entry-log record is answered IO_ERROR (never
NO_SUCH_ENTRY, never other bytes), logged and counted in ``bookie_storage_damage_found_total``; damage to an
acknowledged journal record stops the start with a message naming the file, the offset and the flag, and with
the flag the bookie starts and counts what it skipped."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_ledger.client.rpc_errors import BookieStatus
from pyspark_ledger.errors import BookieProcessError
from tests.bookie.conftest import KEY, client_for, entry, make_bookie, metadata_uri, scrape  # noqa: F401
from tests.bookie_storage.helpers import flip_byte

READ_DAMAGE = 'bookie_storage_damage_found_total{where="read"}'
JOURNAL_DAMAGE = 'bookie_storage_damage_found_total{where="journal"}'


def add_entries(client, ledger_id: int, count: int) -> None:
    with client.add_stream() as stream:
        futures = [stream.add(ledger_id, e, KEY, entry(ledger_id, e)) for e in range(count)]
        assert all(future.result(30).ok for future in futures)


def find(directory: Path, pattern: str, data: bytes) -> tuple[Path, int]:
    for path in sorted(directory.glob(pattern)):
        offset = path.read_bytes().find(data)
        if offset >= 0:
            return path, offset
    raise AssertionError(f"{data[:20]!r}... is in no {pattern} file of {directory}")


@pytest.mark.parametrize("damage", ["flip_body", "truncate_log"])
def test_a_damaged_entry_log_record_is_an_io_error_and_counted(make_bookie, client_for, damage):
    bookie = make_bookie(checkpoint_interval=0).start()
    add_entries(client_for(bookie), 1, 10)
    bookie.stop()  # a graceful stop checkpoints: the entries are read from the entry log from now on
    path, offset = find(bookie.data_dir / "entry_logs", "*.log", entry(1, 5))
    if damage == "flip_body":
        flip_byte(path, offset + 30)
    else:
        with open(path, "r+b") as file:
            file.truncate(offset + 30)
    bookie.start()
    client = client_for(bookie)
    answer = client.read(1, 5, 5, master_key=KEY)
    assert answer.status == BookieStatus.IO_ERROR and not answer.entries
    assert "ledger 1 entry 5 is unreadable" in answer.message
    assert client.read(1, 4, 4, master_key=KEY).entries == ((4, entry(1, 4)),)
    assert scrape(bookie.metrics_url)[READ_DAMAGE] == 1
    assert "is unreadable" in (bookie.data_dir / "bookie-stderr.log").read_text()


def test_damage_to_an_acknowledged_journal_record_stops_the_start(make_bookie, client_for):
    bookie = make_bookie(checkpoint_interval=0).start()
    add_entries(client_for(bookie), 1, 10)
    bookie.kill()  # no checkpoint: the journal holds the entries
    path, offset = find(bookie.data_dir / "journal", "*.txn", entry(1, 3))
    flip_byte(path, offset + 10)
    with pytest.raises(BookieProcessError) as caught:
        bookie.start()
    reason = str(caught.value).splitlines()[-1]
    assert "cannot start" in reason and str(path) in reason and "--skip-journal-corruption" in reason
    assert "Traceback" not in str(caught.value)
    bookie.flags["skip_journal_corruption"] = True
    bookie.start()
    assert scrape(bookie.metrics_url)[JOURNAL_DAMAGE] >= 1
    client = client_for(bookie)
    assert [client.read(1, e, e, master_key=KEY).entries for e in (0, 9)] == [((0, entry(1, 0)),), ((9, entry(1, 9)),)]
