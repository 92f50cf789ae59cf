"""``ledger security init-repair-key --out FILE``: give the cluster its repair key.

Makes an X25519 key pair, writes the private half to FILE (a new file, mode
0600) and stores the public half in the metadata store; from then on every
new ledger's password is sealed to it, and ``--repair-key FILE`` lets
``ledger autorecovery``, ``ledger ledgers rereplicate``, ``ledger recover``
and ``ledger ledgers delete`` act on any ledger. A cluster that already has a
repair key keeps it: the command refuses (the secrets sealed to it would
become unreadable).
"""
from __future__ import annotations

import argparse
import os

from pyspark_ledger.cli.admin import metadata_store
from pyspark_ledger.cli.output import print_json
from pyspark_ledger.errors import RepairKeyError
from pyspark_ledger.security.repair_key import RepairKey, save_private_key
from pyspark_ledger.security.repair_store import read_repair_public_key, register_repair_public_key


def add_parsers(commands: argparse._SubParsersAction) -> None:
    security = commands.add_parser("security", help="the cluster's repair key")
    actions = security.add_subparsers(dest="action", metavar="ACTION")
    init = actions.add_parser(
        "init-repair-key", help="make the cluster's repair key: private half to --out FILE (0600), public half "
                                "to the metadata store; new ledgers' passwords are sealed to it")
    init.add_argument("--out", required=True, metavar="FILE", help="where to write the private key (a new file)")
    init.set_defaults(handler=cmd_init_repair_key)


def init_repair_key(store, out: str) -> RepairKey:
    """Make and register the cluster's repair key, its private half written to ``out``."""
    existing = read_repair_public_key(store)
    if existing is not None:
        raise RepairKeyError(
            f"this cluster already has repair key {existing.key_id}: keep using its private key file "
            "(--repair-key FILE or LEDGER_REPAIR_KEY); it is never replaced, since every ledger's sealed password "
            "needs it")
    key = RepairKey.generate()
    save_private_key(key, out)
    try:
        register_repair_public_key(store, key.public)
    except BaseException:
        os.unlink(out)  # ours, just made: a key the cluster does not know would open nothing
        raise
    return key


def cmd_init_repair_key(args: argparse.Namespace) -> int:
    out = os.path.abspath(args.out)
    with metadata_store(args) as store:
        key = init_repair_key(store, out)
    if args.json:
        print_json({"key_id": key.key_id, "private_key_file": out})
    else:
        print(f"repair key {key.key_id}: private half written to {out} (mode 0600; keep it safe, only "
              "administrators should hold it), public half stored in the metadata store")
        print(f"export LEDGER_REPAIR_KEY={out}")
    return 0
