"""The authority flags of administrative commands: ``--password`` (repeatable) and ``--repair-key FILE``.

A ledger's password is, per ledger: its secret sealed to the cluster's repair
key when ``--repair-key`` (or ``$LEDGER_REPAIR_KEY``) names the key file, else
the first ``--password`` that matches it (default: ``$LEDGER_PASSWORD``, else
the empty password).
"""
from __future__ import annotations

import argparse
import os


def add_repair_key_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repair-key", default=os.environ.get("LEDGER_REPAIR_KEY") or None, metavar="FILE",
                        help="the cluster's repair key file (mode 0600): opens any ledger's sealed password "
                             "(default: $LEDGER_REPAIR_KEY)")


def add_passwords_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--password", dest="passwords", action="append", default=None, metavar="P",
                        help="a ledger password to try, for ledgers the repair key does not open (repeatable; "
                             "default: $LEDGER_PASSWORD, else empty)")


def add_authority_args(parser: argparse.ArgumentParser) -> None:
    add_passwords_arg(parser)
    add_repair_key_arg(parser)


def candidate_passwords(args: argparse.Namespace) -> list[bytes]:
    given = args.passwords if args.passwords else [os.environ.get("LEDGER_PASSWORD", "")]
    return [password.encode() for password in given]

