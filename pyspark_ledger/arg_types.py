"""Number arguments of the command lines (``ledger`` and ``bookie-server``), parsed and checked in one place.

``number(kind, accept, expected)`` makes an argparse ``type``: the text as an
``int`` (``_`` separators allowed, as in ``10_000``) or a ``float``, kept if
``accept(value)`` holds, else an error that says what is expected and what was
given. argparse puts the flag's name in front, so every message names the
flag, the rule and the bad value, whether the text was no number at all or a
number out of range. A float check refuses NaN, since NaN fails every
comparison.

It sits at the bottom of the layers (argparse only) so that the bookie server
uses it without importing the CLI.
"""
from __future__ import annotations

import argparse
from typing import Callable, TypeVar

N = TypeVar("N", int, float)


def number(kind: type[N], accept: Callable[[N], bool], expected: str) -> Callable[[str], N]:
    """An argparse ``type`` for a number of ``kind`` that ``accept`` keeps; ``expected`` says which."""
    def parse(text: str) -> N:
        try:
            value = kind(text.replace("_", "")) if kind is int else kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}")
        return value
    parse.__name__ = expected  # argparse names the type in some errors
    return parse
