"""``ledger streams list | show NAME``: the streams of the log layer and their partitions' ledgers."""
from __future__ import annotations

import argparse
import datetime as dt

from pyspark_ledger.cli.admin import metadata_store
from pyspark_ledger.cli.output import print_json, print_record, print_table


def add_parsers(commands: argparse._SubParsersAction) -> None:
    streams = commands.add_parser("streams", help="list streams or show one stream's partitions and ledgers")
    actions = streams.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="every stream with its partition count").set_defaults(handler=cmd_list)
    show = actions.add_parser("show", help="a stream's schema, replication and each partition's ledgers")
    show.add_argument("name")
    show.set_defaults(handler=cmd_show)


def _stream_client(store):
    from pyspark_ledger.log import StreamClient

    return StreamClient(store)


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
    with metadata_store(args) as store, _stream_client(store) as streams:
        rows = [_summary(streams.open_stream(name)) for name in streams.list_streams()]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ["stream", "partitions", "replication", "digest", "created"])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with metadata_store(args) as store, _stream_client(store) as streams:
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
    print_table(ledgers, ["partition", "ledger_seq", "ledger_id", "entries", "bytes"])
    return 0
