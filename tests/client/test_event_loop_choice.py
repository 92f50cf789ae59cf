"""The client's network thread runs on uvloop where it is installed, else on asyncio's loop; the environment
variable chooses, and anything else is refused by name. Both loops carry real adds and reads end to end."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_ledger.client import io_loop
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.testing.bookies import BookieCluster, child_env

REPO = Path(__file__).resolve().parents[2]


def loop_module(loop: asyncio.AbstractEventLoop) -> str:
    try:
        return type(loop).__module__.split(".")[0]
    finally:
        loop.close()


def test_uvloop_by_default_where_installed_and_asyncio_when_chosen(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(io_loop.EVENT_LOOP_ENV, raising=False)
    assert loop_module(io_loop.new_event_loop()) == "uvloop"
    monkeypatch.setenv(io_loop.EVENT_LOOP_ENV, "asyncio")
    assert loop_module(io_loop.new_event_loop()) == "asyncio"
    monkeypatch.setenv(io_loop.EVENT_LOOP_ENV, "uvloop")
    assert loop_module(io_loop.new_event_loop()) == "uvloop"


def test_an_unknown_loop_is_refused_naming_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv(io_loop.EVENT_LOOP_ENV, "trio")
    with pytest.raises(InvalidConfigurationError, match="PYSPARK_LEDGER_EVENT_LOOP='trio'.*uvloop, asyncio"):
        io_loop.new_event_loop()


def test_uvloop_chosen_but_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv(io_loop.EVENT_LOOP_ENV, "uvloop")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # an import of it fails, as where it is not installed
    with pytest.raises(InvalidConfigurationError, match="pip install uvloop"):
        io_loop.new_event_loop()
    monkeypatch.delenv(io_loop.EVENT_LOOP_ENV)
    assert loop_module(io_loop.new_event_loop()) == "asyncio"  # unset: asyncio's, with no error


CHILD = """
import json, sys
from pyspark_ledger.client import ClientConfig, LedgerClient
from pyspark_ledger.client.io_loop import acquire_io_loop, release_io_loop
with LedgerClient(sys.argv[1], ClientConfig(framed_adds=True)) as client:
    writer = client.create_ledger(3, 3, 2, password=b"pw")
    futures = [writer.append_async(b"entry %d" % i) for i in range(300)]
    ids = [future.result(30) for future in futures]
    writer.close()
    reader = client.open_ledger(writer.ledger_id, password=b"pw")
    read = [entry.data for entry in reader.read(0, 299)]
    loop = acquire_io_loop()
    kind = type(loop._loop).__module__.split(".")[0]
    release_io_loop(loop)
print(json.dumps({"ids": ids == list(range(300)), "read": read == [b"entry %d" % i for i in range(300)],
                  "loop": kind}))
"""


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_adds_and_reads_through_real_bookies_on_each_loop(tmp_path, choice):
    if choice == "uvloop":
        pytest.importorskip("uvloop")
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    with BookieCluster(3, tmp_path / "bookies", uri, add_port=0):
        done = subprocess.run([sys.executable, "-c", CHILD, uri], capture_output=True, text=True, timeout=120,
                              env=child_env({io_loop.EVENT_LOOP_ENV: choice}), cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"ids": True, "read": True, "loop": choice}
