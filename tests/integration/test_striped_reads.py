"""Striped ledgers (E > Qw) read back exactly from real bookie processes: with speculative reads on and off,
with a bookie of the ensemble killed, and with bookies answering IO_ERROR for damaged entries (read from the
other replicas; an entry no replica can give is an error, never "no such entry")."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import LedgerError, NoSuchEntryError
from pyspark_ledger.protocol.schedule import write_set_bookies
from tests.bookie.conftest import scrape
from tests.bookie_storage.helpers import flip_byte
from tests.integration.conftest import PASSWORD, payload

pytestmark = pytest.mark.bookies(5)
ENTRIES = 2_000
READ_DAMAGE = 'bookie_storage_damage_found_total{where="read"}'


@pytest.fixture
def metadata_uri(tmp_path) -> str:
    """SQLite only: what is tested here is the read path, not the metadata backend."""
    return f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"


def write_closed(client, quorums: tuple[int, int, int], count: int = ENTRIES, size: int = 64):
    with client.create_ledger(*quorums, password=PASSWORD) as writer:
        futures = [writer.append_async(payload(index, size)) for index in range(count)]
        [future.result(60) for future in futures]
    return writer.ledger_id, writer.metadata.current_fragment.bookies


def read_all(client, ledger_id: int, first: int = 0) -> list[bytes]:
    return [entry.data for entry in client.open_ledger(ledger_id, PASSWORD).read(first)]


@pytest.mark.parametrize("quorums", [(5, 3, 2), (3, 2, 2)], ids=["E5-Qw3", "E3-Qw2"])
@pytest.mark.parametrize("speculative", [0.05, None], ids=["speculative", "no-speculation"])
def test_striped_ledger_reads_back_exactly(bookies, make_client, quorums, speculative):
    ledger_id, _ = write_closed(make_client(), quorums)
    reader = make_client(speculative_read_delay_s=speculative, read_batch_entries=300)
    assert read_all(reader, ledger_id) == [payload(i, 64) for i in range(ENTRIES)]
    assert read_all(reader, ledger_id, 1_234) == [payload(i, 64) for i in range(1_234, ENTRIES)]
    views = reader.open_ledger(ledger_id, PASSWORD).read(copy=False)  # Spark's reads: views into the answers
    assert [bytes(entry.data) for entry in views] == [payload(i, 64) for i in range(ENTRIES)]


@pytest.mark.parametrize("quorums", [(5, 3, 2), (3, 2, 2)], ids=["E5-Qw3", "E3-Qw2"])
def test_striped_ledger_reads_with_a_bookie_of_its_ensemble_killed(bookies, make_client, quorums):
    ledger_id, ensemble = write_closed(make_client(), quorums)
    by_id = {bookie.bookie_id: bookie for bookie in bookies}
    by_id[ensemble[1]].kill()
    assert read_all(make_client(), ledger_id) == [payload(i, 64) for i in range(ENTRIES)]


def damage_entry(bookie, index: int) -> None:
    """Flip a byte of entry ``index``'s payload in the bookie's entry logs (the bookie is stopped)."""
    needle = payload(index, 64)
    for path in sorted((bookie.data_dir / "entry_logs").glob("*.log")):
        offset = path.read_bytes().find(needle)
        if offset >= 0:
            flip_byte(path, offset + 20)
            return
    raise AssertionError(f"entry {index} is in no entry log of {bookie.bookie_id}")


def test_bookies_answering_errors_are_read_around_and_a_lost_entry_is_an_error(bookies, make_client):
    client = make_client()
    ledger_id, ensemble = write_closed(client, (5, 3, 2))
    by_id = {bookie.bookie_id: bookie for bookie in bookies}
    lost, damaged = 1_111, (700, 701, 702, 1_500)  # mid-stripe entries: answers stop short at them
    plan: dict[str, list[int]] = {}
    for index in damaged:  # on the first replica of each: the one a read asks first
        plan.setdefault(write_set_bookies(index, ensemble, 3)[0], []).append(index)
    for bookie_id in write_set_bookies(lost, ensemble, 3):  # on every replica
        plan.setdefault(bookie_id, []).append(lost)
    for bookie_id, indexes in plan.items():
        bookie = by_id[bookie_id]
        bookie.stop()  # a graceful stop checkpoints: reads come from the entry logs
        for index in indexes:
            damage_entry(bookie, index)
        bookie.start()
    reader = make_client().open_ledger(ledger_id, PASSWORD)
    got: list[bytes] = []
    with pytest.raises(LedgerError) as caught:
        for entry in reader.read():
            got.append(entry.data)
    assert got == [payload(i, 64) for i in range(lost)]
    assert not isinstance(caught.value, NoSuchEntryError), caught.value
    assert f"entry {lost}" in str(caught.value)
    assert [entry.data for entry in reader.read(lost + 1)] == [payload(i, 64) for i in range(lost + 1, ENTRIES)]
    for bookie_id in plan:  # each damaged bookie was asked, and answered an error (not other bytes)
        assert scrape(by_id[bookie_id].metrics_url).get(READ_DAMAGE, 0) >= 1, bookie_id
