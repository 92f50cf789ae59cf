"""The remembered shape of a sandbox: ``sandbox.json`` in its data dir.

A sandbox restarted on the same data dir must bring every bookie back under
the same identity (its id is ``127.0.0.1:<port>`` and its cookie ties that id
to its data dir), on the same metadata store. ``SandboxLayout`` records what
that takes: the metadata kind (``sqlite`` or ``zookeeper``), the ZooKeeper
port, per bookie its id, port and data dir (relative to the sandbox dir), and
the number of zones the bookies are spread over (``zones``; absent in files of
sandboxes without zones): bookie i is in zone ``ZONE_NAMES[i % zones]``
(``zone-a``, ``zone-b``, ...), given to it as bookie-server ``--zone``.
``load_layout`` validates the file and names what is wrong with it;
``save_layout`` replaces it atomically (write, fsync, rename).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_ledger.errors import DataDirectoryError

LAYOUT_FILE = "sandbox.json"
FORMAT_VERSION = 1
SQLITE = "sqlite"
ZOOKEEPER = "zookeeper"
HOST = "127.0.0.1"
ZONE_NAMES = tuple(f"zone-{letter}" for letter in "abcdefghijklmnopqrstuvwxyz")
MAX_ZONES = len(ZONE_NAMES)


@dataclass(frozen=True)
class BookieSlot:
    """One bookie of the sandbox: its fixed port and its data dir under the sandbox dir."""

    port: int
    data_dir: str

    @property
    def bookie_id(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass
class SandboxLayout:
    """Metadata kind, ZooKeeper port (or None) and the bookies, in start order."""

    metadata: str
    zookeeper_port: int | None = None
    bookies: list[BookieSlot] = field(default_factory=list)
    zones: int | None = None  # bookies spread round-robin over this many zones; None: no --zone

    @property
    def uses_zookeeper(self) -> bool:
        return self.metadata == ZOOKEEPER

    def zone_of(self, index: int) -> str | None:
        """The zone of bookie ``index`` (None when the sandbox has no zones)."""
        return None if self.zones is None else ZONE_NAMES[index % self.zones]

    def to_document(self, metadata_uri: str) -> dict:
        return {
            "format": FORMAT_VERSION,
            "metadata": self.metadata,
            "metadata_uri": metadata_uri,  # informational: recomputed from the dir on start
            "zookeeper_port": self.zookeeper_port,
            "bookies": [{"bookie_id": slot.bookie_id, "port": slot.port, "data_dir": slot.data_dir,
                         **({"zone": self.zone_of(index)} if self.zones else {})}  # informational
                        for index, slot in enumerate(self.bookies)],
            **({"zones": self.zones} if self.zones else {}),
        }


def layout_path(base_dir: Path) -> Path:
    return Path(base_dir) / LAYOUT_FILE


def load_layout(base_dir: Path) -> SandboxLayout | None:
    """The layout remembered in ``base_dir``, or None for a new sandbox."""
    path = layout_path(base_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataDirectoryError(f"cannot read the sandbox layout {path}: {exc}") from exc
    try:
        return _parse(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise DataDirectoryError(
            f"the sandbox layout {path} is unreadable ({exc}): restore it, or start a new sandbox in another "
            "--data-dir (deleting it would make the bookies come back under new ids, without their data)"
        ) from exc


def save_layout(base_dir: Path, layout: SandboxLayout, metadata_uri: str) -> None:
    """Write the layout atomically."""
    path = layout_path(base_dir)
    pending = path.with_name(path.name + ".tmp")
    data = json.dumps(layout.to_document(metadata_uri), indent=2) + "\n"
    with open(pending, "w") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(pending, path)


def _parse(doc: dict) -> SandboxLayout:
    if doc.get("format") != FORMAT_VERSION:
        raise ValueError(f"format {doc.get('format')!r} is not {FORMAT_VERSION}")
    metadata = doc["metadata"]
    if metadata not in (SQLITE, ZOOKEEPER):
        raise ValueError(f"metadata {metadata!r} is neither {SQLITE!r} nor {ZOOKEEPER!r}")
    zookeeper_port = doc.get("zookeeper_port")
    if metadata == ZOOKEEPER:
        zookeeper_port = _port(zookeeper_port, "zookeeper_port")
    slots = [_slot(item) for item in doc["bookies"]]
    if not slots:
        raise ValueError("it lists no bookies")
    if len({slot.port for slot in slots}) != len(slots):
        raise ValueError("two bookies share a port")
    zones = doc.get("zones")
    if zones is not None and (not isinstance(zones, int) or isinstance(zones, bool) or not 1 <= zones <= MAX_ZONES):
        raise ValueError(f"zones {zones!r} is not a number of zones from 1 to {MAX_ZONES}")
    return SandboxLayout(metadata, zookeeper_port if metadata == ZOOKEEPER else None, slots, zones)


def _slot(item: dict) -> BookieSlot:
    data_dir = item["data_dir"]
    if not isinstance(data_dir, str) or not data_dir or "/" in data_dir or data_dir in (".", ".."):
        raise ValueError(f"bookie data_dir {data_dir!r} is not a plain directory name")
    return BookieSlot(_port(item["port"], "bookie port"), data_dir)


def _port(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        raise ValueError(f"{what} {value!r} is not a TCP port")
    return value
