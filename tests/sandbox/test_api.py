"""The Python API: ``Sandbox`` as a context manager and with start()/stop(), on real bookie processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import (BookieProcessError, DataDirectoryError, InvalidArgumentError,
                                   InvalidConfigurationError, InvalidStateError)
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.sandbox import Sandbox
from pyspark_ledger.sandbox.lock import DataDirLock

from .conftest import REPO_ROOT, bookie_alive, payload, read_payloads, wait_until, write_entries

LEDGER_ID = 7
ENTRIES = 4


def registered(uri: str) -> set[str]:
    with open_metadata_store(uri) as store:
        return set(store.bookies())


def test_context_manager_kills_restarts_adds_and_cleans_up():
    with Sandbox(bookies=2, lease_seconds=1) as sb:
        data_dir, ids = sb.data_dir, sb.bookie_ids
        assert sb.temporary and data_dir.is_dir() and registered(sb.metadata_uri) == set(ids)
        write_entries(ids[0], LEDGER_ID, ENTRIES, sb.metadata_uri)

        assert sb.kill_bookie(0) == -signal.SIGKILL
        assert sb.poll_exits() == []  # a deliberate kill is not an unexpected death
        wait_until(lambda: ids[0] not in registered(sb.metadata_uri), "the killed bookie's lease to expire")
        restarted = sb.start_bookie(0)
        assert restarted.bookie_id == ids[0] and restarted.is_running()
        with pytest.raises(BookieProcessError, match=f"bookie 0 \\({ids[0]}\\) is already running"):
            sb.start_bookie(0)
        assert read_payloads(ids[0], LEDGER_ID, ENTRIES) == [payload(ids[0], e) for e in range(ENTRIES)]

        sb.pause_bookie(0)  # SIGSTOP: alive, silent, its registration lapses
        wait_until(lambda: ids[0] not in registered(sb.metadata_uri), "the paused bookie's lease to lapse")
        assert sb.bookies[0].is_running() and sb.poll_exits() == []
        sb.resume_bookie(0)
        wait_until(lambda: ids[0] in registered(sb.metadata_uri), "the continued bookie to renew its lease")
        assert read_payloads(ids[0], LEDGER_ID, ENTRIES) == [payload(ids[0], e) for e in range(ENTRIES)]

        os.kill(sb.bookies[1].pid, signal.SIGKILL)
        [(index, died)] = wait_until(sb.poll_exits, "the crash to be noticed")
        assert (index, died.bookie_id, died.returncode) == (1, ids[1], -signal.SIGKILL)
        assert sb.poll_exits() == []  # reported once

        added = sb.add_bookie()
        assert sb.bookie_ids == [*ids, added.bookie_id] and added.bookie_id not in ids
        remembered = json.loads((data_dir / "sandbox.json").read_text())
        assert [b["bookie_id"] for b in remembered["bookies"]] == sb.bookie_ids
        with pytest.raises(InvalidArgumentError, match=r"bookies 0\.\.2"):
            sb.stop_bookie(3)
        pids = [bookie.pid for bookie in sb.bookies]
    assert not data_dir.exists()
    assert not [pid for pid in pids if bookie_alive(pid)]
    with pytest.raises(InvalidStateError, match="not running"):
        sb.kill_bookie(0)


def test_kept_dir_is_locked_while_running_and_restarts_with_the_same_bookies(tmp_path):
    data_dir = tmp_path / "kept"
    sb = Sandbox(bookies=2, data_dir=data_dir).start()
    try:
        ids = sb.bookie_ids
        with pytest.raises(DataDirectoryError, match=f"another sandbox \\(pid {os.getpid()}\\)"):
            Sandbox(data_dir=data_dir).start()
        assert sb.running and sb.bookies[0].is_running()  # the refused one touched nothing
        sb.stop_bookie(1)
        assert sb.bookies[1].returncode == 0 and registered(sb.metadata_uri) == {ids[0]}
    finally:
        sb.stop()
    assert (data_dir / "sandbox.json").is_file() and not sb.running
    with pytest.raises(InvalidConfigurationError, match="holds 2 bookies"):
        Sandbox(bookies=1, data_dir=data_dir).start()
    with Sandbox(data_dir=data_dir) as again:
        assert again.bookie_ids == ids and all(b.is_running() for b in again.bookies)
    assert data_dir.is_dir()


def test_a_lock_left_by_a_killed_sandbox_does_not_block(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, pathlib; from pyspark_ledger.sandbox.lock import DataDirLock; "
         f"DataDirLock(pathlib.Path({str(tmp_path)!r})).acquire(); print('locked', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(DataDirectoryError, match=f"pid {holder.pid}\\).*`kill {holder.pid}`"):
            DataDirLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()
    lock = DataDirLock(tmp_path).acquire()
    assert (tmp_path / "sandbox.lock").read_text() == f"{os.getpid()}\n"
    lock.release()


@pytest.mark.parametrize("count", [0, -1, True, "3", 2.0])
def test_bad_bookie_counts_are_refused(count):
    with pytest.raises(InvalidConfigurationError, match="bookies must be a whole number >= 1"):
        Sandbox(bookies=count)


def test_unusable_data_dirs_are_refused_before_anything_starts(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DataDirectoryError, match="not empty and holds no sandbox.json"):
        Sandbox(data_dir=foreign).start()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sandbox.json").write_text('{"format": 1, "metadata": "sqlite", "bookies": []}')
    with pytest.raises(DataDirectoryError, match="sandbox.json is unreadable \\(it lists no bookies\\)"):
        Sandbox(data_dir=broken).start()
    with pytest.raises(InvalidConfigurationError, match="cannot appear in a metadata URI"):
        Sandbox(data_dir=tmp_path / "what?").start()
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "what?").exists()


def test_an_interpreter_that_forgets_stop_leaves_no_bookie_behind():
    script = ("from pyspark_ledger.sandbox import Sandbox; sb = Sandbox(bookies=1).start(); "
              "print(sb.bookies[0].pid, sb.data_dir, flush=True)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    pid_text, data_dir = done.stdout.split()
    assert not bookie_alive(int(pid_text)) and not os.path.exists(data_dir)


def test_a_killed_owner_leaves_no_bookie_behind(tmp_path):
    """A notebook kernel that dies (kill -9: no atexit, no __exit__): its sandbox's bookies stop by themselves."""
    script = ("import sys; from pyspark_ledger.sandbox import Sandbox; "
              f"sb = Sandbox(bookies=2, data_dir={str(tmp_path / 'sb')!r}).start(); "
              "print(*[b.pid for b in sb.bookies], flush=True); sys.stdin.read()")
    owner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=REPO_ROOT)
    pids: list[int] = []
    try:
        pids = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(pids) == 2 and all(bookie_alive(pid) for pid in pids)
        owner.kill()
        owner.wait(30)
        deadline = time.monotonic() + 60
        while any(bookie_alive(pid) for pid in pids):
            assert time.monotonic() < deadline, "a bookie outlived its killed owner"
            time.sleep(0.1)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        owner.stdin.close()
        owner.stdout.close()
        for pid in pids:
            if bookie_alive(pid):
                os.kill(pid, signal.SIGKILL)
    for index in range(2):  # they stopped gracefully: checkpointed and said so
        log = (tmp_path / "sb" / f"bookie-{index}" / "bookie-stderr.log").read_text()
        assert "is gone: stopping" in log and "stopped" in log


def add_ports(uri: str) -> list[object]:
    with open_metadata_store(uri) as store:
        return [(registration.info or {}).get("add_port") for registration in store.bookies().values()]


def framed_streams(sb: Sandbox) -> list[float]:
    def count(url: str) -> float:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith('bookie_framed_add_connections_total{outcome="streamed"}'))
    return [count(bookie.metrics_url) for bookie in sb.bookies]


@pytest.mark.parametrize("flags", [{}, {"add_port": -1}])
def test_the_sandbox_s_bookies_take_adds_on_a_framed_port_unless_turned_off(flags):
    """docs/protocol.md W11: the sandbox (the demo's cluster) starts its bookies with a framed add port, and a
    client's adds take it; ``add_port=-1`` keeps adds on gRPC."""
    with Sandbox(bookies=2, **flags) as sb:
        with LedgerClient(sb.metadata_uri) as client:
            with client.create_ledger(2, 2, 2) as ledger:
                assert [ledger.append(b"entry %d" % n) for n in range(5)] == list(range(5))
        ports, streamed = add_ports(sb.metadata_uri), framed_streams(sb)
    if flags:
        assert ports == [0, 0] and streamed == [0, 0]
    else:
        assert all(isinstance(port, int) and port > 0 for port in ports) and all(n >= 1 for n in streamed)


def test_a_restarted_bookie_comes_back_on_the_framed_port_it_had():
    """A client that read the ports before a restart reaches the bookie at once (a moved port failed the
    notebook's recovery: its write-backs went to the old ports and found no replacement)."""
    def registered(uri: str) -> dict[str, object]:
        with open_metadata_store(uri) as store:
            return {bookie_id: (registration.info or {}).get("add_port")
                    for bookie_id, registration in store.bookies().items()}

    with Sandbox(bookies=2) as sb:
        before = {bookie.bookie_id: bookie.add_port for bookie in sb.bookies}
        assert all(before.values()) and registered(sb.metadata_uri) == before
        sb.kill_bookie(0)
        sb.stop_bookie(1)
        sb.start_bookie(0)
        sb.start_bookie(1)
        assert {bookie.bookie_id: bookie.add_port for bookie in sb.bookies} == before
        assert registered(sb.metadata_uri) == before
