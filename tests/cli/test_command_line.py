"""One consistent `ledger` command line: global flags after any command, groups that list their actions,
positional help, human sizes, --version, one line for an unreachable ZooKeeper, a read past the end in flag
terms, a bad flag with its own command's usage, and simpletest's password."""
from __future__ import annotations

import argparse
import json
import re

import pytest

from pyspark_ledger import __version__
from pyspark_ledger.cli.global_args import LOCAL_COMMANDS, _sub_parsers
from pyspark_ledger.cli.main import build_parser, main
from pyspark_ledger.cli.output import human_bytes, human_bytes_exact
from pyspark_ledger.testing.ports import free_port
from tests.cli.conftest import ledger
from tests.cli.test_admin_cli import run_ledger, store_uri  # noqa: F401  (fixture)

GLOBAL_FLAGS = ("--metadata", "--json", "--tls-ca", "--tls-cert", "--tls-key")


def _commands():
    """(top-level command name, parser) for every parser below `ledger`."""
    return list(_sub_parsers(build_parser()))


def test_every_command_that_talks_to_the_cluster_takes_the_global_flags():
    checked = 0
    for name, parser in _commands():
        if name in LOCAL_COMMANDS:
            continue
        missing = [flag for flag in GLOBAL_FLAGS if flag not in parser._option_string_actions]
        assert not missing, f"{parser.prog} lacks {missing}"
        checked += 1
    assert checked >= 19  # bookies, ledgers ..., streams ..., security ..., simpletest, recover, autorecovery


@pytest.mark.parametrize("argv", [
    ["--metadata", "sqlite:///a.db", "--json", "--tls-ca", "ca.pem", "ledgers", "read", "7"],
    ["ledgers", "read", "7", "--metadata", "sqlite:///a.db", "--json", "--tls-ca", "ca.pem"],
    ["ledgers", "--metadata", "sqlite:///a.db", "read", "--json", "7", "--tls-ca", "ca.pem"],
])
def test_global_flags_land_in_the_same_place_before_or_after_the_command(argv):
    args = build_parser().parse_args(argv)
    assert (args.metadata, args.json, args.tls_ca, args.ledger_id) == ("sqlite:///a.db", True, "ca.pem", 7)


def test_a_global_flag_not_repeated_after_the_command_keeps_its_value(monkeypatch):
    args = build_parser().parse_args(["--metadata", "sqlite:///a.db", "--json", "streams", "gc", "events"])
    assert (args.metadata, args.json, args.tls_ca) == ("sqlite:///a.db", True, None)
    monkeypatch.setenv("LEDGER_METADATA", "sqlite:///env.db")
    monkeypatch.setenv("LEDGER_TLS_CA", "env-ca.pem")
    args = build_parser().parse_args(["bookies"])
    assert (args.metadata, args.json, args.tls_ca) == ("sqlite:///env.db", False, "env-ca.pem")


def test_global_flags_after_the_command_run_it(store_uri):  # noqa: F811
    result = run_ledger("ledgers", "list", "--metadata", store_uri, "--json")
    assert result.returncode == 0, result.stderr
    assert [row["state"] for row in json.loads(result.stdout)] == ["OPEN", "CLOSED"]
    shown = run_ledger("ledgers", "show", "1", "--json", "--metadata", store_uri)
    assert json.loads(shown.stdout)["length"] == 4096


@pytest.mark.parametrize("group,actions", [
    ("ledgers", ("list", "show", "read", "delete", "underreplicated", "rereplicate")),
    ("streams", ("list", "show", "gc", "delete", "repair")),
    ("security", ("init-repair-key",)),
])
def test_a_group_without_an_action_lists_its_actions(capsys, group, actions):
    assert main([group]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: ledger {group} ")
    listed = [line.split()[0] for line in err.splitlines() if line.startswith("    ") and line.split()]
    assert set(actions) <= set(listed), err
    assert "required" not in err


def test_every_positional_argument_has_help():
    for _, parser in _commands():
        for action in parser._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{parser.prog}: {action.metavar or action.dest} has no help"


def test_positional_help_is_shown(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["ledgers", "show", "-h"])
    assert exit_.value.code == 0
    assert re.search(r"\n  LEDGER_ID +the ledger to show\n", capsys.readouterr().out)


@pytest.mark.parametrize("count,text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (4096, "4.0 KiB"),
                                        (60 * 1024 * 1024, "60.0 MiB"), (3 * 1024 ** 3 // 2, "1.5 GiB")])
def test_human_bytes(count, text):
    assert human_bytes(count) == text


def test_sizes_are_human_in_tables_and_bytes_in_json(store_uri):  # noqa: F811
    listed = run_ledger("--metadata", store_uri, "ledgers", "list")
    closed = [line for line in listed.stdout.splitlines() if "CLOSED" in line][0]
    assert "4.0 KiB" in closed and "4096" not in closed
    shown = run_ledger("--metadata", store_uri, "ledgers", "show", "1")
    assert re.search(r"^length +4\.0 KiB \(4096 bytes\)$", shown.stdout, re.MULTILINE), shown.stdout
    assert human_bytes_exact(100) == "100 B"
    assert json.loads(run_ledger("--metadata", store_uri, "--json", "ledgers", "list").stdout)[1]["length"] == 4096


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"pyspark-ledger {__version__}"


def test_an_unreachable_zookeeper_is_one_line_naming_the_uri():
    uri = f"zk://127.0.0.1:{free_port()}/ledgers?session_timeout=1"  # nothing listens there
    result = run_ledger("bookies", "--metadata", uri)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith("ledger: error: cannot connect to ZooKeeper at ") and uri in result.stderr


@pytest.mark.parametrize("argv,usage,bad", [
    (("ledgers", "read", "0", "--bogus"), "usage: ledger ledgers read ", "--bogus"),
    (("streams", "gc", "events", "--min-agee", "5"), "usage: ledger streams gc ", "--min-agee 5"),
    (("ledgers", "list", "--bogus"), "usage: ledger ledgers list ", "--bogus"),
    (("bookies", "--bogus"), "usage: ledger bookies ", "--bogus"),
])
def test_a_bad_flag_shows_the_usage_of_its_command(argv, usage, bad):
    result = run_ledger(*argv)
    assert result.returncode == 2
    assert result.stderr.startswith(usage), result.stderr
    assert result.stderr.rstrip().endswith(f"error: unrecognized arguments: {bad}"), result.stderr


def test_simpletest_says_and_takes_its_password(sandbox, client):
    default = ledger(sandbox, "simpletest", "-n", "3", "-s", "10")
    assert default.returncode == 0, default.stderr
    assert "password" in default.stdout and "simpletest" in default.stdout.split("password", 1)[1].splitlines()[0]
    kept = ledger(sandbox, "simpletest", "-n", "4", "-s", "10", "--keep", "--password", "s3cret", "--json")
    assert kept.returncode == 0, kept.stderr
    report = json.loads(kept.stdout)
    assert report["password"] == "s3cret"
    read = ledger(sandbox, "--json", "ledgers", "read", str(report["ledger_id"]), "--password", "s3cret")
    assert read.returncode == 0, read.stderr
    assert len(json.loads(read.stdout)) == 4
    wrong = ledger(sandbox, "ledgers", "read", str(report["ledger_id"]), "--password", "simpletest")
    assert wrong.returncode == 1 and "password" in wrong.stderr


def test_a_read_past_the_end_speaks_of_the_flags(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        for i in range(10):
            writer.append(b"e%d" % i)
    past = ledger(sandbox, "ledgers", "read", str(writer.ledger_id), "--password", "pw", "--from", "3", "--to", "20")
    assert past.returncode == 2
    assert past.stderr.splitlines() == [
        f"ledger: error: --from 3 --to 20 is not a range of entries of ledger {writer.ledger_id}: its readable "
        "entries are 0..9; pass --from and --to within them (or leave out --to to read up to 9)"]
    beyond = ledger(sandbox, "ledgers", "read", str(writer.ledger_id), "--password", "pw", "--from", "12")
    assert beyond.returncode == 2 and "readable entries are 0..9" in beyond.stderr
    assert "()" not in past.stderr + beyond.stderr  # no Python method named
