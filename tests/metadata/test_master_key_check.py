"""Issue 12 part 7: ledger metadata carries a check of the master key; older metadata has none and reads."""
from __future__ import annotations

import json

from pyspark_ledger.client.metadata_ops import create_ledger
from pyspark_ledger.entry import master_key
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.model import Fragment, LedgerMetadata, master_key_check, master_key_matches
from pyspark_ledger.metadata.update_loop import RetryPolicy


def test_new_ledgers_carry_a_check_of_their_master_key(tmp_path):
    with open_metadata_store(f"sqlite:///{tmp_path}/m.db", create=True) as store:
        created = create_ledger(store, ("b1", "b2"), 2, 1, "crc32c", b"pw", None, RetryPolicy(attempts=3))
        stored = store.read_ledger(created.value.ledger_id).value
    assert stored.master_key_check == created.value.master_key_check
    assert master_key_matches(master_key(b"pw"), stored.master_key_check)
    assert not master_key_matches(master_key(b"other"), stored.master_key_check)
    assert master_key(b"pw").hex() not in stored.to_json().decode()


def test_metadata_without_the_check_keeps_its_json_and_reads_back():
    old = LedgerMetadata(7, 1, 1, 1, (Fragment(0, ("b1",)),))
    assert "master_key_check" not in json.loads(old.to_json())
    assert LedgerMetadata.from_json(old.to_json()) == old
    checked = old.with_changes(master_key_check=master_key_check(b"k" * 32))
    assert LedgerMetadata.from_json(checked.to_json()) == checked


def test_malformed_checks_match_no_key():
    for check in ["", "sha256", "sha256$zz$00", "md5$00$00", "sha256$00$" + "0" * 64]:
        assert not master_key_matches(b"k" * 32, check)
