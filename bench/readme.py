"""README.md's benchmark tables, generated from the results file between markers.

In README.md, each generated table sits between ``<!-- bench-table:NAME -->`` and
``<!-- /bench-table:NAME -->`` (NAME: a table of ``report.py``); everything outside the markers is prose
written by hand and left alone. ``python -m bench.readme`` rewrites the blocks from
``bench/results/latest.json``; ``--check`` only says whether README.md is in step (exit 1 if not), as the
test suite does.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench import report

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LATEST = ROOT / "bench" / "results" / "latest.json"
BLOCK = re.compile(r"(<!-- bench-table:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /bench-table:(?P=name) -->)", re.S)


def regenerate(text: str, session: dict) -> str:
    """``text`` with every marked block replaced by its table from ``session``; unknown names are an error."""
    found = report.blocks(session)

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in found:
            raise ValueError(f"README marker bench-table:{name} names no table; known: {', '.join(found)}")
        return f"{match.group(1)}{found[name]}\n{match.group(4)}"
    return BLOCK.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.readme", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if README.md is out of step")
    parser.add_argument("--results", type=Path, default=LATEST, help=f"the results file (default {LATEST})")
    args = parser.parse_args(argv)
    if not args.results.exists():
        parser.error(f"no results file at {args.results}; run python -m bench first")
    text = README.read_text()
    fresh = regenerate(text, json.loads(args.results.read_text()))
    if args.check:
        if fresh != text:
            print("README.md's benchmark tables differ from bench/results/latest.json: "
                  "run python -m bench.readme", file=sys.stderr)
            return 1
        return 0
    README.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
