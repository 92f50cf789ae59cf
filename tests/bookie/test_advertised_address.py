"""``--advertised-address``: a bookie listening on every address registers one that clients can dial.

A bookie on a wildcard (``--host 0.0.0.0``) used to register ``0.0.0.0`` as its
address and id: it worked only on its own host, where connecting to 0.0.0.0
reaches the local machine. Now the wildcard needs ``--advertised-address``,
which becomes the registered address and the default id.
"""
from __future__ import annotations

import pytest

from bookie_server.config import parse_args
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.bookies import BookieProcess

REQUIRED = ["--data-dir", "/tmp/d", "--port", "4000", "--metadata", "sqlite:////tmp/m.db"]


def test_the_advertised_address_is_the_id_and_defaults_to_the_host():
    assert parse_args(REQUIRED).effective_bookie_id == "127.0.0.1:4000"
    config = parse_args(REQUIRED + ["--host", "0.0.0.0", "--advertised-address", "10.1.2.3"])
    assert (config.host, config.advertised_host, config.effective_bookie_id) == ("0.0.0.0", "10.1.2.3", "10.1.2.3:4000")
    assert parse_args(REQUIRED + ["--host", "10.1.2.3"]).effective_bookie_id == "10.1.2.3:4000"


@pytest.mark.parametrize("flags,words", [
    (["--host", "0.0.0.0"], "give --advertised-address"),
    (["--host", "::"], "give --advertised-address"),
    (["--host", "0.0.0.0", "--advertised-address", "0.0.0.0"], "--advertised-address"),
    (["--advertised-address", "a b"], "--advertised-address"),
    (["--advertised-address", "x" * 254], "at most 253"),
])
def test_a_wildcard_without_an_address_to_dial_is_refused(flags, words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(REQUIRED + flags)
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err


def test_a_wildcard_bookie_registers_its_advertised_address(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db"
    with BookieProcess(tmp_path / "bookie", uri, host="0.0.0.0", advertised_address="127.0.0.1") as bookie:
        store = open_metadata_store(uri)
        try:
            registered = store.bookies()
        finally:
            store.close()
        assert list(registered) == [f"127.0.0.1:{bookie.port}"]
        info = registered[f"127.0.0.1:{bookie.port}"].info
        assert (info["host"], info["port"]) == ("127.0.0.1", bookie.port)


def test_the_advertised_port_is_registered_and_part_of_the_default_id():
    """``--advertised-port``: a bookie behind something that forwards another port (a proxy, a container's port
    mapping) registers the port clients dial; it listens on ``--port`` still."""
    config = parse_args(REQUIRED + ["--advertised-port", "5000"])
    assert (config.port, config.dial_port, config.effective_bookie_id) == (4000, 5000, "127.0.0.1:5000")
    assert parse_args(REQUIRED).dial_port == 4000


@pytest.mark.parametrize("value", ["0", "65536", "x"])
def test_a_bad_advertised_port_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(REQUIRED + ["--advertised-port", value])
    assert exit_info.value.code == 2
    assert "--advertised-port" in capsys.readouterr().err
