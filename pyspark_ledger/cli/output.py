"""Printing results of the ``ledger`` command as aligned tables or JSON."""
from __future__ import annotations

import json
import sys
from typing import Any, Sequence, TextIO

from pyspark_ledger.errors import InternalError


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


_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(count: int) -> str:
    """A byte count as people read it: '512 B', '4.0 KiB', '1.5 GiB' (powers of 1024)."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in _UNITS:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise InternalError(f"human_bytes found no unit for {count}")  # pragma: no cover - the last unit always returns


def human_bytes_exact(count: int) -> str:
    """``human_bytes`` with the exact count beside it when the unit rounds: '4.0 KiB (4096 bytes)'."""
    return human_bytes(count) if count < 1024 else f"{human_bytes(count)} ({count} bytes)"
