"""The ``ledger`` command's global flags (``--metadata``, ``--json``, ``--tls-ca/--tls-cert/--tls-key``), accepted
before the command and after it alike, and the parser tree they are spread over.

The top-level parser declares them with their real defaults (the environment).
``spread_global_flags`` re-declares them on every sub-command's parser with
``default=argparse.SUPPRESS``: a flag given after the command then lands in the
same attribute, and one not given there leaves the top-level value alone.
Every parser of the tree also records itself (``cli_parser``) so that ``main``
can report an unknown flag with the usage of the command it was given to,
and print a command group's actions when no action is named.
"""
from __future__ import annotations

import argparse
import os
from typing import Iterator

from pyspark_ledger.cli.tls_args import add_tls_args

#: Commands that talk neither to a metadata store nor to bookies: no global flag but those they declare.
LOCAL_COMMANDS = ("sandbox", "demo")


def add_metadata_arg(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument(
        "--metadata", default=default, metavar="URI",
        help="metadata service URI: sqlite:///abs/path/metadata.db or zk://host:port/chroot "
             "(default: $LEDGER_METADATA)")


def add_json_arg(parser: argparse.ArgumentParser, default=False) -> None:
    parser.add_argument("--json", action="store_true", default=default, help="print JSON instead of tables")


def add_global_args(parser: argparse.ArgumentParser) -> None:
    """The global flags with their real defaults, on the top-level parser."""
    add_metadata_arg(parser, os.environ.get("LEDGER_METADATA"))
    add_tls_args(parser)
    add_json_arg(parser)


def spread_global_flags(top: argparse.ArgumentParser) -> None:
    """Give every sub-command's parser the global flags it lacks (defaults suppressed) and its ``cli_parser``."""
    top.set_defaults(cli_parser=top)
    for name, parser in _sub_parsers(top):
        parser.set_defaults(cli_parser=parser)
        if name in LOCAL_COMMANDS:
            continue
        declared = parser._option_string_actions
        if "--metadata" not in declared:
            add_metadata_arg(parser, argparse.SUPPRESS)
        if "--tls-ca" not in declared:
            add_tls_args(parser, argparse.SUPPRESS)
        if "--json" not in declared:
            add_json_arg(parser, argparse.SUPPRESS)


def _sub_parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser below ``parser`` (depth first), with the name of its top-level command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias of a command already visited
                    continue
                seen.add(id(sub))
                yield name, sub
                for _, deeper in _sub_parsers(sub):
                    yield name, deeper
