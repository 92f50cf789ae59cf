"""Issue 12 part 6: a start on a port already in use fails on the port, before it changes any cookie.

Checking the cookie only reads; it is written once the bookie is known to serve. So a second start with
another data dir on the real bookie's port (same bookie id), even with --allow-new-data-dir, cannot replace
the registered cookie and lock the real bookie out of its own data dir."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import NoSuchKeyError
from pyspark_ledger.testing.bookies import BookieProcess

from bookie_server.cookie import COOKIE_FILE, PENDING_FILE, metadata_key, plan_cookie


def assert_port_named(process, port: int) -> None:
    assert process.returncode == 1, process.stderr
    assert "Traceback" not in process.stderr, process.stderr
    last = process.stderr.strip().splitlines()[-1]
    assert last.startswith("bookie-server:") and f"port {port} is in use" in last, last
    assert "wiped" not in process.stderr and "cookie" not in last, process.stderr


def test_a_second_start_on_a_taken_port_changes_no_cookie(make_bookie, metadata_store, metadata_uri, tmp_path):
    real = make_bookie("real").start()
    key = metadata_key(real.bookie_id)
    registered = metadata_store.get(key)
    intruder = BookieProcess(tmp_path / "intruder", metadata_uri, port=real.port)
    assert intruder.bookie_id == real.bookie_id

    assert_port_named(intruder.run_to_exit(), real.port)
    intruder.flags["allow_new_data_dir"] = True  # the advice the old message gave
    assert_port_named(intruder.run_to_exit(), real.port)

    after = metadata_store.get(key)
    assert (after.value, after.version) == (registered.value, registered.version)
    assert not (intruder.data_dir / COOKIE_FILE).exists() and not (intruder.data_dir / PENDING_FILE).exists()
    assert metadata_store.bookies()[real.bookie_id].info["data_dir"] == str(real.data_dir)
    assert real.is_running()
    assert real.stop() == 0
    real.start()  # the real bookie still starts on its own data dir
    assert real.stop() == 0


def test_checking_a_cookie_writes_nothing_until_commit(metadata_store, tmp_path):
    data_dir = tmp_path / "fresh"
    plan = plan_cookie(metadata_store, data_dir, "b1:1")
    assert not data_dir.exists()
    with pytest.raises(NoSuchKeyError):
        metadata_store.get(metadata_key("b1:1"))
    cookie = plan.commit()
    assert (data_dir / COOKIE_FILE).exists() and metadata_store.get(metadata_key("b1:1")).value == cookie.to_bytes()
    again = plan_cookie(metadata_store, data_dir, "b1:1")
    assert again.action == "keep" and again.commit() == cookie
