"""``--zone`` / ``--rack`` of bookie-server: checked where they enter, published with the registration, read
back bounded (docs/protocol.md P4: a registration without them is in the default zone and rack)."""
from __future__ import annotations

import pytest

from bookie_server.config import parse_args
from bookie_server.registration import bookie_info
from pyspark_ledger.metadata.bookie_location import DEFAULT_LOCATION, Location, read_location

REQUIRED = ["--data-dir", "/tmp/d", "--port", "4000", "--metadata", "sqlite:////tmp/m.db"]


def test_defaults_and_flags_reach_the_registration_info():
    default = parse_args(REQUIRED)
    assert (default.zone, default.rack) == ("default-zone", "default-rack")
    config = parse_args(REQUIRED + ["--zone", "eu-west-1a", "--rack", "R_12.b"])
    info = bookie_info("127.0.0.1", 4000, None, None, "/tmp/d", location=Location(config.zone, config.rack))
    assert (info["zone"], info["rack"]) == ("eu-west-1a", "R_12.b")
    assert read_location(info) == Location("eu-west-1a", "R_12.b")
    assert read_location(bookie_info("127.0.0.1", 4000, None, None, "/tmp/d")) == DEFAULT_LOCATION


@pytest.mark.parametrize("flags,words", [
    (["--zone", ""], "argument --zone: zone name must be 1 to 64 characters, got 0"),
    (["--zone", "z" * 65], "argument --zone: zone name must be 1 to 64 characters, got 65"),
    (["--rack", "a b"], "argument --rack: rack name may contain only letters, digits"),
    (["--rack", "r/1"], "argument --rack: rack name may contain only"),
    (["--zone", "zone\n"], "argument --zone: zone name may contain only"),
])
def test_bad_names_are_refused_naming_the_flag_and_the_limit(flags, words, capsys):
    with pytest.raises(SystemExit) as raised:
        parse_args(REQUIRED + flags)
    assert raised.value.code == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("info", [None, "eu", {}, {"zone": 3}, {"zone": "a" * 65, "rack": "ok"},
                                  {"zone": "ok", "rack": ["r"]}, {"zone": "ü"}])
def test_unusable_registration_fields_read_as_the_default(info):
    location = read_location(info)
    expected_rack = "ok" if isinstance(info, dict) and info.get("rack") == "ok" else "default-rack"
    expected_zone = "ok" if isinstance(info, dict) and info.get("zone") == "ok" else "default-zone"
    assert location == Location(expected_zone, expected_rack)
