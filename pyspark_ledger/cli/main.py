"""Entry point of the ``ledger`` command: argument parsing and error reporting.

Each sub-command lives in its own module and registers itself through
``add_parser(subparsers)``; this module only dispatches and turns
``LedgerError`` into one clear line on stderr with a non-zero exit status.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from pyspark_ledger import __version__
from pyspark_ledger.cli import admin, data_cmds, sandbox_cmd, stream_cmds
from pyspark_ledger.cli import demo_cmd, repair_cmds, security_cmds
from pyspark_ledger.cli.global_args import add_global_args, spread_global_flags
from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError, LedgerError

EXIT_ERROR = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledger",
        description="pyspark-ledger: a replicated, durable log store (BookKeeper-style).",
        # no abbreviations of global options: `ledger sandbox --tls` would read as an ambiguous --tls-*
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"pyspark-ledger {__version__}")
    add_global_args(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    ledgers_actions = admin.add_parsers(commands)
    data_cmds.add_parsers(commands, ledgers_actions)
    repair_cmds.add_parsers(commands, ledgers_actions)
    stream_cmds.add_parsers(commands)
    security_cmds.add_parsers(commands)
    sandbox_cmd.add_parsers(commands)
    demo_cmd.add_parsers(commands)
    spread_global_flags(parser)  # --metadata, --json, --tls-* after the command too
    return parser


def quiet_library_logs() -> None:
    """kazoo logs every failed connection attempt to stderr; the CLI reports an unreachable ZooKeeper in one
    line of its own (naming the URI) instead."""
    logging.getLogger("kazoo").setLevel(logging.CRITICAL + 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    given_to = getattr(args, "cli_parser", parser)  # the deepest (sub-)command parsed
    if unknown:
        given_to.error(f"unrecognized arguments: {' '.join(unknown)}")  # with that command's usage; exits 2
    if not getattr(args, "handler", None):
        given_to.print_help(sys.stderr)  # `ledger`, `ledger ledgers`: the commands or actions there are
        return EXIT_USAGE
    quiet_library_logs()
    try:
        return int(args.handler(args) or 0)
    except (InvalidConfigurationError, InvalidArgumentError) as exc:
        print(f"ledger: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except LedgerError as exc:
        print(f"ledger: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `ledger ledgers list | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
