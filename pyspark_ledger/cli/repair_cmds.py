"""Repair sub-commands after a bookie is lost for good: ``ledgers underreplicated``, ``ledgers rereplicate``
and ``autorecovery``.

``underreplicated`` lists the ledgers whose fragments name a bookie that is
not registered now (no password needed: it only reads metadata).
``rereplicate`` copies what the lost bookies held to replacements and records
them (``LedgerClient.rereplicate``); with ``--all`` it does so for every
under-replicated ledger. Each ledger is opened with its own password: its
secret sealed to the repair key (``--repair-key``), else the first matching
``--password``; a ledger nothing opens, or that cannot be repaired, is
reported by id (with what is missing) and the others are repaired.
``autorecovery`` runs ``AutoRecovery``: it re-replicates, round after round,
what bookies unregistered for ``--delay`` seconds held, until SIGTERM/Ctrl-C;
a ledger still open on a lost bookie after ``--open-ledger-grace`` seconds
(its writer is presumably dead) is recovered (fenced, closed) first.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from pyspark_ledger.arg_types import number
from pyspark_ledger.cli.admin import metadata_store
from pyspark_ledger.cli.authority_args import add_authority_args, candidate_passwords
from pyspark_ledger.cli.output import print_json, print_table
from pyspark_ledger.cli.progress import CopyProgress
from pyspark_ledger.cli.tls_args import client_config
from pyspark_ledger.cli.zone_args import add_zone_arg
from pyspark_ledger.errors import InvalidConfigurationError, LedgerError, NoSuchLedgerError
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.protocol.rereplication import lost_bookies, plan_repairs


def add_parsers(commands: argparse._SubParsersAction, ledgers_actions: argparse._SubParsersAction) -> None:
    auto = commands.add_parser(
        "autorecovery", help="re-replicate, in a loop, what bookies gone for --delay seconds held")
    auto.add_argument("--delay", type=float, default=60.0, metavar="S",
                      help="seconds a bookie must stay unregistered before it counts as lost (default 60)")
    auto.add_argument("--interval", type=float, default=10.0, metavar="S",
                      help="seconds between rounds (default 10)")
    auto.add_argument("--open-ledger-grace", type=_grace, default=30.0, metavar="S|off",
                      help="seconds a ledger may stay open with its last fragment on a lost bookie before it is "
                           "recovered (fenced and closed: a writer still alive fails) and repaired; 'off' never "
                           "(default 30; with --once only 0 acts)")
    auto.add_argument("--once", action="store_true", help="run one round and exit (lost = unregistered now)")
    add_authority_args(auto)
    add_zone_arg(auto)
    auto.set_defaults(handler=cmd_autorecovery)
    under = ledgers_actions.add_parser(
        "underreplicated", help="ledgers whose fragments name bookies that are not registered now")
    under.set_defaults(handler=cmd_underreplicated)
    rerep = ledgers_actions.add_parser(
        "rereplicate", help="copy what lost bookies held to other bookies and record them in the metadata")
    rerep.add_argument("ledger_ids", type=int, nargs="*", metavar="LEDGER_ID",
                       help="the ledgers to re-replicate (or --all)")
    rerep.add_argument("--all", action="store_true", help="every under-replicated ledger")
    rerep.add_argument("--bookie", action="append", default=None, metavar="ID",
                       help="treat this bookie as lost even if registered (repeatable; e.g. to drain it)")
    add_authority_args(rerep)
    add_zone_arg(rerep)
    rerep.set_defaults(handler=cmd_rereplicate)


def underreplicated(store: MetadataStore, lost: list[str] | None = None) -> list[dict]:
    """One row per ledger whose fragments name a lost bookie (default: any unregistered one)."""
    registered = list(store.bookies(include_read_only=True))
    rows = []
    for ledger_id in sorted(store.list_ledgers()):
        try:
            md = store.read_ledger(ledger_id).value
        except NoSuchLedgerError:
            continue  # deleted meanwhile
        named = {bookie for fragment in md.fragments for bookie in fragment.bookies}
        missing = lost_bookies(md, registered) | (named & set(lost or ()))
        if not missing:
            continue
        plan = plan_repairs(md, missing)
        rows.append({"ledger_id": ledger_id, "state": md.state, "lost_bookies": sorted(missing),
                     "sealed_slots": len(plan.repairs), "open_fragments": len(plan.skipped_open_fragments)})
    return rows


def cmd_underreplicated(args: argparse.Namespace) -> int:
    with metadata_store(args) as store:
        rows = underreplicated(store)
    if args.json:
        print_json(rows)
    elif rows:
        print_table([{**row, "lost_bookies": ",".join(row["lost_bookies"])} for row in rows],
                    ["ledger_id", "state", "lost_bookies", "sealed_slots", "open_fragments"])
    else:
        print("no under-replicated ledgers")
    return 0


def cmd_rereplicate(args: argparse.Namespace) -> int:
    from pyspark_ledger import LedgerClient

    if bool(args.ledger_ids) == bool(args.all):
        raise InvalidConfigurationError("name the ledgers to re-replicate, or pass --all (not both)")
    results, failed = [], 0
    with metadata_store(args) as store:
        ids = args.ledger_ids or [row["ledger_id"] for row in underreplicated(store, args.bookie)]
        if not ids:
            _say_nothing_to_do(args)
            return 0
        say(f"re-replicating {len(ids)} ledger(s)")
        client = LedgerClient(store, client_config(args))
        passwords = candidate_passwords(args)
        progress = CopyProgress()
        try:
            for ledger_id in ids:
                try:
                    report = client.rereplicate(ledger_id, None, _lost(client, ledger_id, args.bookie),
                                                passwords=passwords, on_progress=progress)
                    results.append({**report.as_dict(), "ok": True})
                except LedgerError as exc:
                    failed += 1
                    results.append({"ledger_id": ledger_id, "ok": False, "error": str(exc)})
                progress.finish()
                if not args.json:
                    _print(args, results[-1:])  # each ledger's outcome as soon as it is known
        finally:
            progress.finish()
            client.close()
    if args.json:
        print_json(results)
    return 1 if failed else 0


def say(line: str) -> None:
    """A progress line on stderr (stdout keeps the results, and only them with --json)."""
    print(line, file=sys.stderr, flush=True)


def _say_nothing_to_do(args: argparse.Namespace) -> None:
    if args.json:
        print_json([])
    else:
        print("no under-replicated ledgers: nothing to re-replicate", flush=True)


def _lost(client, ledger_id: int, named: list[str] | None) -> list[str] | None:
    """The named bookies plus every unregistered one the ledger names; None (the default) if none named."""
    if not named:
        return None
    md = client.ledger_metadata(ledger_id)
    return sorted(lost_bookies(md, client.bookies()) | set(named))


def _print(args: argparse.Namespace, results: list[dict]) -> None:
    if args.json:
        print_json(results)
        return
    for result in results:
        if not result["ok"]:
            print(f"ledger {result['ledger_id']}: FAILED: {result['error']}", file=sys.stderr, flush=True)
            continue
        moves = ", ".join(f"{r['lost']} -> {r['replacement']} (entries {r['first_entry_id']}..{r['last_entry_id']}"
                          f", {r['entries']} copied)" for r in result["replaced"]) or "nothing to copy"
        note = (f"; open fragment(s) at {result['skipped_open_fragments']} left to the writer"
                if result["skipped_open_fragments"] else "")
        print(f"ledger {result['ledger_id']}: {moves}{note}", flush=True)


def cmd_autorecovery(args: argparse.Namespace) -> int:
    from pyspark_ledger import LedgerClient
    from pyspark_ledger.client.autorecovery import AutoRecovery

    stop = threading.Event()
    with metadata_store(args) as store:
        client = LedgerClient(store, client_config(args))
        try:
            progress = CopyProgress()
            rounds = _RoundPrinter(args, progress)
            recovery = AutoRecovery(client, candidate_passwords(args), delay_s=0.0 if args.once else args.delay,
                                    interval_s=args.interval, open_grace_s=args.open_ledger_grace,
                                    on_round=rounds, on_progress=progress)
            if args.once:
                return 1 if recovery.run_once().failed else 0
            previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                print(f"auto-recovery: bookies unregistered for {args.delay:g} s are re-replicated "
                      f"(a round every {args.interval:g} s; Ctrl-C stops)", flush=True)
                recovery.run(stop)
            finally:
                signal.signal(signal.SIGTERM, previous)
        finally:
            client.close()
    return 0


_grace_seconds = number(float, lambda value: value >= 0, "expected seconds >= 0 or 'off'")


def _grace(text: str) -> float | None:
    return None if text.strip().lower() == "off" else _grace_seconds(text)


class _RoundPrinter:
    """Prints what a round did; a round with nothing to do says so once (not every round) until work comes."""

    def __init__(self, args: argparse.Namespace, progress: CopyProgress) -> None:
        self._args, self._progress = args, progress
        self._idle_said = False

    def __call__(self, report) -> None:
        self._progress.finish()
        busy = bool(report.repaired or report.failed or report.recovered)
        if not busy and not self._args.once:
            if not self._idle_said:
                say("auto-recovery: nothing to re-replicate now (said again after a round that has work)")
                self._idle_said = True
            return
        self._idle_said = False
        _print_round(self._args, report)


def _print_round(args: argparse.Namespace, report) -> None:
    if args.json:
        print(json.dumps(report.as_dict()), flush=True)
        return
    for ledger_id in report.recovered:
        print(f"ledger {ledger_id}: was open on a lost bookie; recovered (fenced and closed)", flush=True)
    results = [{**r, "ok": True} for r in report.repaired] + [{**f, "ok": False} for f in report.failed]
    if not results:
        print("nothing to re-replicate", flush=True)
    _print(args, results)
