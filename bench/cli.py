"""The command line every benchmark script shares: ``--out FILE``, ``--quick``, sizes that depend on the mode.

``BenchParser(__doc__, quick="what --quick does")`` is a script's parser: its description is the first line of
the script's docstring, it takes ``--out FILE`` (where ``bench.output.emit`` also writes the JSON; the runner,
``python -m bench``, passes it) and, when ``quick`` is given, ``--quick`` (a smoke run). ``number(flag, kind,
full, quick)`` adds a size or a duration: ``full`` unless ``--quick`` (then ``quick``, if given), or what the
user gave; every such number must be positive, else the script stops with an error that names the flag.
``log_warnings()`` sets up the log lines the scripts print on stderr.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Sequence


class BenchParser(argparse.ArgumentParser):
    """A benchmark script's argument parser (see the module docstring)."""

    def __init__(self, doc: str, quick: str | None = None) -> None:
        super().__init__(description=doc.splitlines()[0])
        self._numbers: list[tuple[str, str, float, float | None]] = []  # (flag, dest, full, quick)
        if quick is not None:
            self.add_argument("--quick", action="store_true", help=quick)
        self.add_argument("--out", type=Path, default=None, help="also write the JSON here")

    def number(self, flag: str, kind: type, full: float, quick: float | None = None, *, help: str) -> None:
        """A positive ``kind`` (int or float) option: ``full`` by default, ``quick`` with --quick if given."""
        defaults = f"default {_shown(full)}" + ("" if quick is None else f"; --quick: {_shown(quick)}")
        action = self.add_argument(flag, type=kind, default=None, help=f"{help} ({defaults})")
        self._numbers.append((flag, action.dest, full, quick))

    def parse_args(self, args: Sequence[str] | None = None, namespace=None) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        quick = getattr(parsed, "quick", False)
        for flag, dest, full, quick_value in self._numbers:
            value = getattr(parsed, dest)
            if value is None:
                value = quick_value if quick and quick_value is not None else full
                setattr(parsed, dest, value)
            if not value > 0:
                self.error(f"{flag} must be positive, got {value}")
        return parsed


def _shown(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def log_warnings() -> None:
    """Warnings and errors on stderr, with the time and the logger's name."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
