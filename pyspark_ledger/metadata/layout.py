"""Where things live in ZooKeeper, under the store's chroot.

::

    /ledgers/000/0000/0000/0000/L0042   ledger 42's metadata (LedgerMetadata JSON)
    /idgen                              data: the high part of ledger ids (decimal)
    /idgen/0000000000/id-<seq>          short-lived sequential nodes giving the low part
    /bookies/available/<bookie_id>      ephemeral, a writable bookie (data: JSON info)
    /bookies/readonly/<bookie_id>       ephemeral, a read-only bookie (data: JSON info)
    /kv/<key>                           versioned keys; 'a/b' is the znode /kv/a/b

Ledger ids are zero-padded to 19 digits (2**63 - 1 has 19) and split 3/4/4/4/4,
so no directory has more than 10,000 children and millions of ledgers fit;
walking the tree in name order yields ids in ascending order (the idea of
BookKeeper's long hierarchical ledger manager).
"""
from __future__ import annotations

import re

from pyspark_ledger.metadata.names import check_ledger_id

LEDGERS = "/ledgers"
IDGEN = "/idgen"
BOOKIES = "/bookies"
BOOKIES_AVAILABLE = "/bookies/available"
BOOKIES_READONLY = "/bookies/readonly"
KV = "/kv"
ROOTS = (LEDGERS, IDGEN, BOOKIES_AVAILABLE, BOOKIES_READONLY, KV)

ID_DIGITS = 19
LEVEL_WIDTHS = (3, 4, 4, 4)  # directory levels; the leaf holds the last 4 digits
LEAF_PREFIX = "L"
_LEVEL_PATTERNS = tuple(re.compile(rf"\d{{{width}}}") for width in LEVEL_WIDTHS)
_LEAF_PATTERN = re.compile(rf"{LEAF_PREFIX}\d{{4}}")


def ledger_path(ledger_id: int) -> str:
    """``/ledgers/000/0000/0000/0000/L0042`` for ledger 42."""
    digits = f"{check_ledger_id(ledger_id):0{ID_DIGITS}d}"
    parts, start = [], 0
    for width in LEVEL_WIDTHS:
        parts.append(digits[start:start + width])
        start += width
    return f"{LEDGERS}/{'/'.join(parts)}/{LEAF_PREFIX}{digits[start:]}"


def level_names(names: list[str], depth: int) -> list[str]:
    """The well-formed child names at tree ``depth`` (0 = below /ledgers), sorted.

    Depth ``len(LEVEL_WIDTHS)`` is the leaf level. Stray nodes are ignored.
    """
    pattern = _LEVEL_PATTERNS[depth] if depth < len(LEVEL_WIDTHS) else _LEAF_PATTERN
    return sorted(name for name in names if pattern.fullmatch(name))


def ledger_id_from_parts(parts: list[str]) -> int:
    """The id from the directory names and the leaf name of its path."""
    *dirs, leaf = parts
    return int("".join(dirs) + leaf[len(LEAF_PREFIX):])


def bookie_path(bookie_id: str, read_only: bool) -> str:
    return f"{BOOKIES_READONLY if read_only else BOOKIES_AVAILABLE}/{bookie_id}"


def key_path(key: str) -> str:
    """``/kv/<key>``; the empty key is ``/kv`` itself (for listing top-level keys)."""
    return f"{KV}/{key}" if key else KV


def idgen_bucket(high: int) -> str:
    """The parent of the sequential nodes that give ids with high part ``high``."""
    return f"{IDGEN}/{high:010d}"
