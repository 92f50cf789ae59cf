"""Admin sub-commands over the metadata store: ``bookies`` and ``ledgers list|show|delete``."""
from __future__ import annotations

import argparse
import datetime as dt
import os
from contextlib import contextmanager
from typing import Iterator

from pyspark_ledger.cli.authority_args import add_repair_key_arg
from pyspark_ledger.cli.tls_args import client_config
from pyspark_ledger.cli.output import human_bytes, human_bytes_exact, print_json, print_record, print_table
from pyspark_ledger.errors import InvalidConfigurationError, LedgerInUseError, NoSuchLedgerError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.bookie_location import read_location
from pyspark_ledger.metadata.bookie_space import AREAS, Space, read_space
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import MetadataStore


def add_parsers(commands: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Register ``bookies`` and ``ledgers``; returns the ``ledgers`` actions for other modules to extend."""
    bookies = commands.add_parser("bookies", help="list the live bookies")
    bookies.set_defaults(handler=cmd_bookies)

    ledgers = commands.add_parser("ledgers", help="list, show, read, repair or delete ledgers")
    actions = ledgers.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="all ledger ids with state and size").set_defaults(handler=cmd_ledgers_list)
    show = actions.add_parser("show", help="one ledger's metadata and fragments")
    show.add_argument("ledger_id", type=int, metavar="LEDGER_ID", help="the ledger to show")
    show.set_defaults(handler=cmd_ledgers_show)
    delete = actions.add_parser("delete", help="delete a ledger (bookies then reclaim its entries for good); "
                                               "needs its --password or the cluster's --repair-key")
    delete.add_argument("ledger_id", type=int, metavar="LEDGER_ID", help="the ledger to delete")
    delete.add_argument("--password", default=os.environ.get("LEDGER_PASSWORD"), metavar="P",
                        help="the ledger's password (default: $LEDGER_PASSWORD)")
    delete.add_argument("--force", action="store_true",
                        help="delete it even if a stream's log refers to it (that range of the stream is then "
                             "lost; readers fail, or skip it with failOnDataLoss=false)")
    add_repair_key_arg(delete)
    delete.set_defaults(handler=cmd_ledgers_delete)
    return actions


@contextmanager
def metadata_store(args: argparse.Namespace) -> Iterator[MetadataStore]:
    if not args.metadata:
        raise InvalidConfigurationError(
            "no metadata store given: pass --metadata URI or set LEDGER_METADATA "
            "(e.g. sqlite:///tmp/ledger/metadata.db or zk://127.0.0.1:2181/ledgers)"
        )
    store = open_metadata_store(args.metadata)  # create=False: NoSuchMetadataStoreError, nothing made
    try:
        yield store
    finally:
        store.close()


def ledger_summary(md: LedgerMetadata) -> dict:
    return {
        "ledger_id": md.ledger_id,
        "state": md.state,
        "ensemble": f"E={md.ensemble_size} Qw={md.write_quorum} Qa={md.ack_quorum}",
        "last_entry_id": md.last_entry_id if md.is_closed else "",
        "length": md.length if md.is_closed else "",
        "fragments": len(md.fragments),
        "created": dt.datetime.fromtimestamp(md.ctime_ms / 1000, dt.timezone.utc).isoformat(timespec="seconds"),
    }


def ledger_document(md: LedgerMetadata, version: int) -> dict:
    doc = ledger_summary(md)
    doc.update(
        ensemble_size=md.ensemble_size, write_quorum=md.write_quorum, ack_quorum=md.ack_quorum,
        digest_type=md.digest_type, version=version,
        custom_metadata={k: v.decode("utf-8", "backslashreplace") for k, v in md.custom_metadata.items()},
        fragments=[{"first_entry_id": f.first_entry_id, "bookies": list(f.bookies)} for f in md.fragments],
    )
    del doc["ensemble"]
    return doc


def cmd_bookies(args: argparse.Namespace) -> int:
    with metadata_store(args) as store:
        registrations = sorted(store.bookies().values(), key=lambda r: r.bookie_id)
    rows = [{"bookie_id": reg.bookie_id, "mode": "read-only" if reg.read_only else "writable",
             "zone": read_location(reg.info).zone, "rack": read_location(reg.info).rack,
             "tls": _tls_mode(reg.info), "metrics": reg.info.get("metrics_url", "")} for reg in registrations]
    spaces = [read_space(reg.info) for reg in registrations]
    if args.json:  # bytes; null where the bookie does not say (older than the field) or says nonsense
        print_json([{**row, **{f"{area}_{key}": None if space is None else getattr(space, key)
                               for area, space in space_of.items() for key in Space._fields}}
                    for row, space_of in zip(rows, spaces)])
    else:
        print_table([{**row, **{area: _human_space(space) for area, space in space_of.items()}}
                     for row, space_of in zip(rows, spaces)],
                    ["bookie_id", "mode", "zone", "rack", "tls", *AREAS, "metrics"])
    return 0


def _human_space(space: Space | None) -> str:
    """'58.1 GiB free of 251.9 GiB', or 'unknown'."""
    if space is None:
        return "unknown"
    return f"{human_bytes(space.free_bytes)} free of {human_bytes(space.total_bytes)}"


def _tls_mode(info: dict) -> str:
    """How a bookie's port speaks, from its registration: "mtls", "tls", "plaintext" ("" if it does not say)."""
    mode = info.get("tls")
    return "plaintext" if mode == "" else mode if mode in ("tls", "mtls") else ""


def cmd_ledgers_list(args: argparse.Namespace) -> int:
    with metadata_store(args) as store:
        rows = [ledger_summary(md) for md in _existing_ledgers(store)]
    if args.json:
        print_json(rows)  # lengths in bytes
    else:
        print_table([_with_human_length(row, human_bytes) for row in rows],
                    ["ledger_id", "state", "ensemble", "last_entry_id", "length", "fragments", "created"])
    return 0


def _existing_ledgers(store: MetadataStore) -> Iterator[LedgerMetadata]:
    """Metadata of every listed ledger, skipping those deleted while we list."""
    for ledger_id in store.list_ledgers():
        try:
            yield store.read_ledger(ledger_id).value
        except NoSuchLedgerError:
            continue


def _with_human_length(row: dict, unit) -> dict:
    """The row with its ``length`` (bytes, "" while open) in human units, for tables."""
    return {**row, "length": unit(row["length"])} if isinstance(row["length"], int) else row


def cmd_ledgers_show(args: argparse.Namespace) -> int:
    with metadata_store(args) as store:
        versioned = store.read_ledger(args.ledger_id)
    doc = ledger_document(versioned.value, versioned.version)
    if args.json:
        print_json(doc)
        return 0
    fragments = doc.pop("fragments")
    print_record(_with_human_length(doc, human_bytes_exact))
    print()
    print_table([{"first_entry_id": f["first_entry_id"], "bookies": ", ".join(f["bookies"])} for f in fragments],
                ["first_entry_id", "bookies"])
    return 0


def cmd_ledgers_delete(args: argparse.Namespace) -> int:
    """Delete one ledger; refused (LedgerInUseError) if a stream's log refers to it, unless ``--force``."""
    from pyspark_ledger import LedgerClient
    from pyspark_ledger.log.stream_refs import describe_uses, ledger_uses

    with metadata_store(args) as store, LedgerClient(store, client_config(args)) as client:
        client.ledger_metadata(args.ledger_id)  # NoSuchLedgerError first, before any scan of the streams
        uses = ledger_uses(store, args.ledger_id)
        if uses and not args.force:
            raise LedgerInUseError(
                f"ledger {args.ledger_id} is part of {describe_uses(uses)}; deleting it loses that range of the "
                f"stream for good. Not deleted: delete the stream (ledger streams delete NAME) or truncate it "
                f"instead, or pass --force to delete the ledger anyway")
        client.delete_ledger(args.ledger_id, None if args.password is None else args.password.encode())
    broke = [{"stream": use.stream, "partition": use.partition, "ledger_seq": use.ledger_seq,
              "from": str(use.start), "to": str(use.end)} for use in uses]
    if args.json:
        print_json({"deleted": args.ledger_id, "broke": broke})
    else:
        print(f"deleted ledger {args.ledger_id}")
        if uses:
            print(f"warning: this lost {describe_uses(uses)}; readers of the stream now fail on that range, or "
                  "skip it with failOnDataLoss=false; `ledger streams repair NAME` drops what can be dropped")
    return 0
