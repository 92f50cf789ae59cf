"""Sub-commands that read and write entries through the replication client:
``ledgers read``, ``simpletest`` and ``recover``."""
from __future__ import annotations

import argparse
import base64
import os
import time
from contextlib import contextmanager
from typing import Iterator

from pyspark_ledger.cli.admin import metadata_store
from pyspark_ledger.cli.authority_args import add_authority_args, candidate_passwords
from pyspark_ledger.cli.output import print_json, print_record, print_table
from pyspark_ledger.cli.progress import ProgressBar, line_interval_s
from pyspark_ledger.cli.tls_args import client_config
from pyspark_ledger.cli.zone_args import add_zone_arg, check_against_ack
from pyspark_ledger.errors import CorruptEntryError, InvalidArgumentError, InvalidConfigurationError

PREVIEW_BYTES = 48
SIMPLETEST_PASSWORD = "simpletest"


def add_parsers(commands: argparse._SubParsersAction, ledgers_actions: argparse._SubParsersAction) -> None:
    read = ledgers_actions.add_parser("read", help="print a ledger's entries (up to its LAC, or its end)")
    read.add_argument("ledger_id", type=int, metavar="LEDGER_ID", help="the ledger to read")
    read.add_argument("--from", dest="first", type=int, default=0, metavar="N", help="first entry (default 0)")
    read.add_argument("--to", dest="last", type=int, default=None, metavar="M",
                      help="last entry (default: the last readable one)")
    add_password_arg(read)
    read.set_defaults(handler=cmd_read)

    simple = commands.add_parser("simpletest", help="create a ledger, write entries, read them back, verify")
    simple.add_argument("-e", "--ensemble-size", type=int, default=3, help="ensemble size E (default 3)")
    simple.add_argument("-w", "--write-quorum", type=int, default=2, help="write quorum Qw (default 2)")
    simple.add_argument("-a", "--ack-quorum", type=int, default=2, help="ack quorum Qa (default 2)")
    simple.add_argument("-n", "--entries", type=int, default=1000, help="entries to write (default 1000)")
    simple.add_argument("-s", "--entry-size", type=int, default=1024, help="bytes per entry (default 1024)")
    simple.add_argument("--keep", action="store_true", help="keep the test ledger (default: delete it)")
    simple.add_argument("--password", default=SIMPLETEST_PASSWORD, metavar="P",
                        help=f"the test ledger's password, printed with the result, e.g. to read a --keep ledger "
                             f"with `ledger ledgers read ID --password P` (default {SIMPLETEST_PASSWORD!r})")
    add_zone_arg(simple, "-a")
    simple.set_defaults(handler=cmd_simpletest)

    recover = commands.add_parser("recover", help="recover a ledger whose writer died: fence and close it")
    recover.add_argument("ledger_id", type=int, metavar="LEDGER_ID", help="the ledger to recover")
    add_authority_args(recover)
    add_zone_arg(recover)
    recover.set_defaults(handler=cmd_recover)


def add_password_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--password", default=os.environ.get("LEDGER_PASSWORD", ""),
                        help="the ledger's password (default: $LEDGER_PASSWORD, else empty)")


@contextmanager
def ledger_client(args: argparse.Namespace) -> Iterator["LedgerClient"]:  # noqa: F821
    from pyspark_ledger import LedgerClient

    with metadata_store(args) as store:
        client = LedgerClient(store, client_config(args))
        try:
            yield client
        finally:
            client.close()


def _preview(data: bytes) -> str:
    head = data[:PREVIEW_BYTES]
    try:
        text = head.decode("utf-8")
        shown = text if text.isprintable() else repr(text)
    except UnicodeDecodeError:
        shown = head.hex()
    return shown + ("…" if len(data) > PREVIEW_BYTES else "")


def cmd_read(args: argparse.Namespace) -> int:
    with ledger_client(args) as client:
        with client.open_ledger(args.ledger_id, password=args.password.encode(), recovery=False) as reader:
            readable = reader.last_add_confirmed
            last = readable if args.last is None else args.last
            if args.first < 0 or last < args.first - 1 or last > readable:
                raise InvalidArgumentError(_range_error(args, last, readable))
            entries = list(reader.read(args.first, last)) if last >= args.first else []
    if args.json:
        print_json([{"entry_id": e.entry_id, "size": len(e.data), "data_base64": base64.b64encode(e.data).decode()}
                    for e in entries])
    else:
        print_table([{"entry_id": e.entry_id, "size": len(e.data), "data": _preview(e.data)} for e in entries],
                    ["entry_id", "size", "data"])
    return 0


def _range_error(args: argparse.Namespace, last: int, readable: int) -> str:
    """Why --from/--to do not name entries of the ledger, and which flags would (in the CLI's own terms)."""
    where = f"--from {args.first} --to {last} is not a range of entries of ledger {args.ledger_id}"
    if readable < 0:
        return f"{where}: it has no readable entry yet"
    return (f"{where}: its readable entries are 0..{readable}; pass --from and --to within them "
            f"(or leave out --to to read up to {readable})")


def cmd_simpletest(args: argparse.Namespace) -> int:
    if args.entries < 1 or args.entry_size < 0:
        raise InvalidConfigurationError("simpletest needs -n >= 1 entries and -s >= 0 bytes per entry")
    check_against_ack(args.min_ack_quorum_zones, args.ack_quorum, "-a")
    line_interval_s()  # a bad $LEDGER_PROGRESS_EVERY_S is refused before a ledger is made
    payloads = [os.urandom(args.entry_size) for _ in range(min(args.entries, 64))]
    with ledger_client(args) as client:
        writer = client.create_ledger(args.ensemble_size, args.write_quorum, args.ack_quorum,
                                      password=args.password.encode(),
                                      custom_metadata={"created-by": b"ledger simpletest"})
        ledger_id = writer.ledger_id
        started = time.monotonic()
        progress = ProgressBar(f"writing ledger {ledger_id}", args.entries)
        pending = [writer.append_async(payloads[entry_id % len(payloads)]) for entry_id in range(args.entries)]
        for done, future in enumerate(pending, 1):
            future.result()
            progress.update(done)
        progress.finish()
        writer.close()
        write_s = time.monotonic() - started
        started = time.monotonic()
        verified = 0
        progress = ProgressBar(f"reading ledger {ledger_id} back", args.entries)
        with client.open_ledger(ledger_id, password=args.password.encode(), recovery=False) as reader:
            for entry in reader.read(0, args.entries - 1):
                if entry.data != payloads[entry.entry_id % len(payloads)]:
                    raise CorruptEntryError(f"entry {entry.entry_id} of ledger {ledger_id} read back different")
                verified += 1
                progress.update(verified)
        progress.finish()
        read_s = time.monotonic() - started
        if verified != args.entries:
            raise CorruptEntryError(f"wrote {args.entries} entries to ledger {ledger_id}, read back {verified}")
        fragments = len(client.ledger_metadata(ledger_id).fragments)
        if not args.keep:
            client.delete_ledger(ledger_id, args.password.encode())
    result = {"ledger_id": ledger_id, "entries": args.entries, "entry_size": args.entry_size,
              "ensemble": f"E={args.ensemble_size} Qw={args.write_quorum} Qa={args.ack_quorum}",
              "fragments": fragments, "write_entries_per_s": round(args.entries / max(write_s, 1e-9)),
              "read_entries_per_s": round(args.entries / max(read_s, 1e-9)), "verified": True,
              "kept": bool(args.keep), "password": args.password}
    print_json(result) if args.json else print_record(result)
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    with ledger_client(args) as client:
        md = client.recover_ledger(args.ledger_id, passwords=candidate_passwords(args))
    result = {"ledger_id": md.ledger_id, "state": md.state, "last_entry_id": md.last_entry_id,
              "length": md.length, "fragments": len(md.fragments)}
    print_json(result) if args.json else print_record(result)
    return 0
