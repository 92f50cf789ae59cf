"""Seeded damage to a stopped bookie's files, found by directory (never by file format): bit flips, zeroed
ranges, truncation. Every step is described, so a failing round can be replayed from its seed."""
from __future__ import annotations

import os
import random
from pathlib import Path

from bookie_server.storage_config import (ENTRY_LOG_DIR_NAME, INDEX_DIR_NAME, JOURNAL_DIR_NAME, LEDGER_SNAPSHOT_NAME,
                                          MARK_FILE_NAME)

TARGETS = ("journal", "entry_log", "index", "checkpoint", "all", "index_newest")
# index_newest: in every index file, zero the 256 bytes that end at its last non-zero byte (whatever the
# format, what was written last is likely there: the newest entries), which random offsets hit only now and then
NEWEST_BYTES = 256
KINDS = ("flip", "zero", "truncate")


def target_files(data_dir: Path, target: str) -> list[Path]:
    """The non-empty files of one kind of a bookie's storage (``all``: every kind)."""
    if target == "all":
        return sorted({path for kind in ("journal", "entry_log", "index", "checkpoint")
                       for path in target_files(data_dir, kind)})
    if target == "journal":
        found = (data_dir / JOURNAL_DIR_NAME).rglob("*")
    elif target == "entry_log":
        found = (data_dir / ENTRY_LOG_DIR_NAME).glob("*.log")
    elif target in ("index", "index_newest"):
        found = (data_dir / INDEX_DIR_NAME).rglob("*")
    elif target == "checkpoint":  # the mark, the ledger-state snapshot, the entry logs' usage maps
        found = [data_dir / MARK_FILE_NAME, data_dir / LEDGER_SNAPSHOT_NAME,
                 *(path for path in (data_dir / ENTRY_LOG_DIR_NAME).glob("*") if path.suffix != ".log")]
    else:
        raise ValueError(f"unknown damage target {target!r}")
    return sorted(path for path in found if path.is_file() and path.stat().st_size > 0)


def damage(data_dir: Path, target: str, rng: random.Random, steps: int) -> list[str]:
    """Apply ``steps`` random damages to the target's files; return what was done."""
    if target == "index_newest":
        return [_zero_newest(path) for path in target_files(data_dir, target)] or ["no index file to damage"]
    done = []
    for _ in range(steps):
        files = target_files(data_dir, target)
        if not files:
            done.append(f"no {target} file to damage")
            continue
        path = rng.choice(files)
        size = path.stat().st_size
        kind = rng.choice(KINDS)
        offset = rng.randrange(size)
        with open(path, "r+b") as file:
            if kind == "flip":
                file.seek(offset)
                byte = file.read(1)[0]
                bit = 1 << rng.randrange(8)
                file.seek(offset)
                file.write(bytes([byte ^ bit]))
                done.append(f"flip bit {bit:#04x} at {path}:{offset} (size {size})")
            elif kind == "zero":
                length = min(size - offset, rng.choice((1, 8, 64, 512, 4096)))
                file.seek(offset)
                file.write(bytes(length))
                done.append(f"zero {length} bytes at {path}:{offset} (size {size})")
            else:
                os.ftruncate(file.fileno(), offset)
                done.append(f"truncate {path} from {size} to {offset} bytes")
    return done


def _zero_newest(path: Path) -> str:
    data = path.read_bytes()
    end = len(data.rstrip(b"\0"))
    start = max(0, end - NEWEST_BYTES)
    with open(path, "r+b") as file:
        file.seek(start)
        file.write(bytes(end - start))
    return f"zero bytes {start}..{end} of {path} (size {len(data)})"
