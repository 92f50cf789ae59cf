"""Entry point of the ``ledger`` command: argument parsing and error reporting.

Each sub-command lives in its own module and registers itself through
``add_parser(subparsers)``; this module only dispatches and turns
``LedgerError`` into one clear line on stderr with a non-zero exit status.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from pyspark_ledger import __version__
from pyspark_ledger.cli import admin, data_cmds, sandbox_cmd, stream_cmds
from pyspark_ledger.cli import demo_cmd, repair_cmds, security_cmds
from pyspark_ledger.cli.tls_args import add_tls_args
from pyspark_ledger.errors import InvalidConfigurationError, LedgerError

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
    parser.add_argument(
        "--metadata", default=os.environ.get("LEDGER_METADATA"), metavar="URI",
        help="metadata service URI: sqlite:///abs/path/metadata.db or zk://host:port/chroot "
             "(default: $LEDGER_METADATA)",
    )
    add_tls_args(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    ledgers_actions = admin.add_parsers(commands)
    data_cmds.add_parsers(commands, ledgers_actions)
    repair_cmds.add_parsers(commands, ledgers_actions)
    stream_cmds.add_parsers(commands)
    security_cmds.add_parsers(commands)
    sandbox_cmd.add_parsers(commands)
    demo_cmd.add_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except InvalidConfigurationError as exc:
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
