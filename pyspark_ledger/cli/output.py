"""Printing results of the ``ledger`` command as aligned tables or JSON."""
from __future__ import annotations

import json
import sys
from typing import Any, Sequence, TextIO


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], out: TextIO = sys.stdout) -> None:
    """Rows as an aligned text table with a header line; '(none)' when empty."""
    if not rows:
        print("(none)", file=out)
        return
    cells = [[str(row.get(col, "")) for col in columns] for row in rows]
    widths = [max(len(col), *(len(line[i]) for line in cells)) for i, col in enumerate(columns)]
    print("  ".join(col.upper().ljust(w) for col, w in zip(columns, widths)).rstrip(), file=out)
    for line in cells:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip(), file=out)


def print_json(value: Any, out: TextIO = sys.stdout) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str), file=out)


def print_record(record: dict[str, Any], out: TextIO = sys.stdout) -> None:
    """One object as 'key: value' lines."""
    width = max((len(k) for k in record), default=0)
    for key, value in record.items():
        print(f"{key.ljust(width)}  {value}", file=out)
