"""The number argument types shared by ``ledger`` and ``bookie-server``."""
from __future__ import annotations

import argparse

import pytest

from bookie_server.config import parse_args
from pyspark_ledger.arg_types import number

port = number(int, lambda value: 1 <= value <= 65535, "must be a TCP port in 1..65535")
fraction = number(float, lambda value: 0 < value <= 1, "must be a fraction in (0, 1]")


@pytest.mark.parametrize("text, value", [("1", 1), ("65535", 65535), ("3_181", 3181)])
def test_accepted_integers(text, value):
    assert port(text) == value


@pytest.mark.parametrize("text", ["0", "65536", "-1", "abc", "", "1.5", "0x10"])
def test_refused_integers_say_what_is_expected_and_what_was_given(text):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        port(text)
    assert str(refused.value) == f"must be a TCP port in 1..65535, got {text!r}"


@pytest.mark.parametrize("text", ["0", "1.01", "nan", "inf", "-0.5", "half"])
def test_refused_floats_include_nan(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be a fraction in"):
        fraction(text)


def test_accepted_floats():
    assert fraction("0.95") == 0.95 and fraction("1") == 1.0


@pytest.mark.parametrize("flag, value, expected", [
    ("--port", "http", "must be a TCP port in 1..65535, got 'http'"),
    ("--metrics-port", "-2", "must be -1 (off), 0 (any free port) or a port, got '-2'"),
    ("--gc-overreplicated-wait", "nan", "must be a number >= 0, got 'nan'"),
    ("--max-inflight-adds", "0", "must be a positive integer, got '0'"),
])
def test_the_bookie_server_names_the_flag_the_rule_and_the_value(tmp_path, capsys, flag, value, expected):
    base = ["--data-dir", str(tmp_path), "--port", "1", "--metadata", "sqlite:///x.db"]
    with pytest.raises(SystemExit):
        parse_args(base + [flag, value])
    error = capsys.readouterr().err
    assert flag in error and expected in error
