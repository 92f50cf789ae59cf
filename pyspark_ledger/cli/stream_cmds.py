"""``ledger streams list | show | gc | delete | repair``: the streams of the log layer, their ledgers, orphan
sweeps, deleting a stream, and dropping lost ledgers from its record."""
from __future__ import annotations

import argparse
import datetime as dt
import os

from pyspark_ledger.cli.admin import metadata_store
from pyspark_ledger.cli.authority_args import add_repair_key_arg
from pyspark_ledger.cli.output import human_bytes, print_json, print_record, print_table
from pyspark_ledger.cli.tls_args import client_config

PASSWORD_NAME = "--password (or $LEDGER_PASSWORD)"  # how a password the stream refuses is named
DEFAULT_MIN_AGE_S = 3600.0  # pyspark_ledger.log.orphans.DEFAULT_MIN_AGE_S, without importing the client here


def add_parsers(commands: argparse._SubParsersAction) -> None:
    streams = commands.add_parser("streams", help="list streams or show one stream's partitions and ledgers")
    actions = streams.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="every stream with its partition count").set_defaults(handler=cmd_list)
    show = actions.add_parser("show", help="a stream's schema, replication and each partition's ledgers")
    show.add_argument("name", metavar="STREAM", help="the stream to show")
    show.add_argument("--password", default=os.environ.get("LEDGER_PASSWORD", ""),
                      help="the stream's password (default: $LEDGER_PASSWORD, else empty)")
    show.set_defaults(handler=cmd_show)
    gc = actions.add_parser(
        "gc", help="delete a stream's orphan ledgers: created for it by writers that died, referenced by no log",
        description="Delete the ledgers tagged with STREAM that none of its partition logs references and that "
                    "were created at least --min-age seconds ago (left by killed write tasks or drivers). A "
                    "commit racing the sweep is safe: it either keeps its ledgers or fails cleanly.")
    gc.add_argument("name", metavar="STREAM", help="the stream whose orphan ledgers to delete")
    gc.add_argument("--min-age", type=float, default=DEFAULT_MIN_AGE_S, metavar="S",
                    help=f"only ledgers created at least S seconds ago (default {DEFAULT_MIN_AGE_S:g}); keep it "
                         "above the longest write job, or running jobs fail their commit")
    gc.add_argument("--dry-run", action="store_true", help="list the orphans, delete nothing")
    gc.add_argument("--password", default=os.environ.get("LEDGER_PASSWORD", ""), metavar="P",
                    help="the stream's password, which deletes its ledgers (default: $LEDGER_PASSWORD, else empty)")
    add_repair_key_arg(gc)
    gc.set_defaults(handler=cmd_gc)

    delete = actions.add_parser(
        "delete", help="delete a stream and all its ledgers; needs its --password or the cluster's --repair-key")
    delete.add_argument("name", metavar="STREAM", help="the stream to delete")
    _authority_args(delete, "deletes it and its ledgers")
    delete.set_defaults(handler=cmd_delete)

    repair = actions.add_parser(
        "repair", help="drop from a stream's record the lost ledgers (metadata deleted) at the head of its logs",
        description="List the ledgers of STREAM whose metadata is gone and drop those at the head of a "
                    "partition's log (as a truncation: positions keep their meaning). A lost ledger after an "
                    "intact one is kept listed, since dropping it would renumber the later ledgers; readers "
                    "skip it with failOnDataLoss=false.")
    repair.add_argument("name", metavar="STREAM", help="the stream to repair")
    repair.add_argument("--dry-run", action="store_true", help="list the lost ledgers, change nothing")
    _authority_args(repair, "changes its record")
    repair.set_defaults(handler=cmd_repair)


def _authority_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--password", default=os.environ.get("LEDGER_PASSWORD", ""), metavar="P",
                        help=f"the stream's password, which {what} (default: $LEDGER_PASSWORD, else empty)")
    add_repair_key_arg(parser)


def _stream_client(store, args: argparse.Namespace | None = None):
    from pyspark_ledger.log import StreamClient

    if args is None:
        return StreamClient(store, password_name=PASSWORD_NAME)
    return StreamClient(store, password=getattr(args, "password", "").encode(), password_name=PASSWORD_NAME,
                        config=client_config(args))


def _schema_text(info) -> str:
    if info.schema is None:
        return "(none yet: set by the first write)"
    try:
        schema = info.arrow_schema()
    except ImportError:
        return "(stored; install pyarrow to show it)"
    return ", ".join(f"{field.name}: {field.type}" for field in schema)


def _summary(info) -> dict:
    replication = info.replication
    return {
        "stream": info.name,
        "partitions": info.partitions,
        "replication": f"E={replication.ensemble_size} Qw={replication.write_quorum} Qa={replication.ack_quorum}",
        "digest": replication.digest,
        "created": dt.datetime.fromtimestamp(info.ctime_ms / 1000, dt.timezone.utc).isoformat(timespec="seconds"),
    }


def cmd_list(args: argparse.Namespace) -> int:
    with metadata_store(args) as store, _stream_client(store, args) as streams:
        rows = [_summary(streams.open_stream(name)) for name in streams.list_streams()]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ["stream", "partitions", "replication", "digest", "created"])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with metadata_store(args) as store, _stream_client(store, args) as streams:
        info = streams.open_stream(args.name)
        logs = streams.partition_logs(args.name)
        doc = dict(_summary(info), schema=_schema_text(info))
        ledgers = [
            {"partition": partition, "ledger_seq": span.ledger_seq, "ledger_id": span.ledger_id,
             "entries": span.entry_count, "bytes": span.length}
            for partition, log in sorted(logs.items()) for span in log.spans
        ]
    if args.json:
        print_json(dict(doc, ledgers=ledgers))
        return 0
    print_record(doc)
    print()
    print_table([{**row, "bytes": human_bytes(row["bytes"]) if row["bytes"] >= 0 else ""} for row in ledgers],
                ["partition", "ledger_seq", "ledger_id", "entries", "bytes"])
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    with metadata_store(args) as store, _stream_client(store, args) as streams:
        sweep = streams.collect_orphans(args.name, args.min_age, dry_run=args.dry_run)
    rows = [_orphan_row(orphan, sweep) for orphan in sweep.orphans]
    if args.json:
        print_json({"stream": sweep.stream, "min_age_s": sweep.min_age_s, "dry_run": sweep.dry_run,
                    "orphans": rows, "deleted": sorted(sweep.deleted), "young": list(sweep.young)})
        return 0
    shown = [{key: "" if value is None else human_bytes(value) if key == "bytes" else value
              for key, value in row.items()} for row in rows]
    print_table(shown, ["ledger_id", "partition", "state", "entries", "bytes", "age_s", "action"])
    done = f"would delete {len(rows)}" if sweep.dry_run else f"deleted {len(sweep.deleted)}"
    print(f"\nstream {sweep.stream!r}: {done} orphan ledger(s); kept {len(sweep.young)} younger than "
          f"{sweep.min_age_s:g} s")
    return 0


def _orphan_row(orphan, sweep) -> dict:
    if sweep.dry_run:
        action = "would delete"
    else:
        action = ("deleted" if orphan.ledger_id in sweep.deleted
                  else "kept (committed meanwhile, or --password / --repair-key does not open it)")
    return {"ledger_id": orphan.ledger_id, "partition": orphan.partition, "state": orphan.state,
            "entries": None if orphan.entries < 0 else orphan.entries,
            "bytes": None if orphan.length < 0 else orphan.length, "age_s": round(orphan.age_s), "action": action}


def cmd_delete(args: argparse.Namespace) -> int:
    with metadata_store(args) as store, _stream_client(store, args) as streams:
        streams.delete_stream(args.name)
    if args.json:
        print_json({"deleted": args.name})
    else:
        print(f"deleted stream {args.name!r} and its ledgers")
    return 0


def cmd_repair(args: argparse.Namespace) -> int:
    with metadata_store(args) as store, _stream_client(store, args) as streams:
        result = streams.repair_stream(args.name, dry_run=args.dry_run)
    drop = "would drop" if result.dry_run else "dropped"
    rows = [{"partition": lost.partition, "ledger_id": lost.ledger_id, "ledger_seq": lost.ledger_seq,
             "range": f"{lost.start} up to {lost.end}",
             "action": drop if lost.dropped else "kept (intact ledgers follow: readers skip it with "
                                                 "failOnDataLoss=false)"}
            for lost in result.lost]
    if args.json:
        print_json({"stream": result.stream, "dry_run": result.dry_run, "lost": rows})
        return 0
    if not rows:
        print(f"stream {result.stream!r}: no lost ledger; nothing to repair")
        return 0
    print_table(rows, ["partition", "ledger_id", "ledger_seq", "range", "action"])
    dropped = sum(1 for lost in result.lost if lost.dropped)
    print(f"\nstream {result.stream!r}: {drop} {dropped} of {len(rows)} lost ledger(s); the entries they held "
          "are gone")
    return 0
