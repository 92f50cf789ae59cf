"""The ZooKeeper metadata store: ``zk://host:port[,host:port]/chroot?session_timeout=10``.

For clusters, through kazoo. The chroot is created if missing when opened with create=True (bookies). Layout under
it (see ``layout``)::

    /ledgers/000/0000/0000/0000/L0042   ledger metadata, hierarchical (<= 10,000 per dir)
    /idgen, /idgen/<high>/id-<seq>      64-bit id generation (see ``zk_idgen``)
    /bookies/available/<id>             ephemeral, writable bookie (JSON info)
    /bookies/readonly/<id>              ephemeral, read-only bookie (JSON info)
    /kv/<key>                           versioned keys
    /kv/instance-id                     the store's random instance id (see ``instance``)

The instance id is created when a store without one is opened.

Versions are ZooKeeper's ``stat.version`` (0 at create, +1 per write); CAS is
a versioned ``set``/``delete``. Every kazoo error is translated once, in
``zk_session``: NoNode -> NoSuchLedgerError/NoSuchKeyError, BadVersion ->
MetadataVersionConflictError, NodeExists -> MetadataExistsError, connection
loss or timeout -> MetadataError naming the URI (a write's outcome unknown).

Session loss: kazoo reconnects with a new session; bookie registrations are
re-created and watches set again on reconnect (see ``zk_registration`` and
``zk_watch``). Requests made while disconnected wait at most
``max(session_timeout, 2 s)``; kazoo retries
reconnecting at least every second.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterator, Mapping

from pyspark_ledger.errors import (MetadataError, MetadataExistsError, MetadataVersionConflictError,
                                   NoSuchKeyError, NoSuchLedgerError)
from pyspark_ledger.metadata import layout, names
from pyspark_ledger.metadata.instance import ensure_instance_id
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import (BookieRegistration, MetadataStore, Registration,
                                           Versioned, Watch)
from pyspark_ledger.metadata.uri import ZooKeeperTarget
from pyspark_ledger.metadata.zk_idgen import ROLL_AT, ZooKeeperIdGenerator
from pyspark_ledger.metadata.zk_registration import ZooKeeperRegistration, read_bookies
from pyspark_ledger.metadata.zk_session import ZooKeeperSession
from pyspark_ledger.metadata.zk_watch import ZooKeeperBookiesWatch, ZooKeeperLedgerWatch

log = logging.getLogger(__name__)


class ZooKeeperMetadataStore(MetadataStore):
    """MetadataStore over a ZooKeeper ensemble (one kazoo session per store)."""

    def __init__(self, target: ZooKeeperTarget, *, id_roll_at: int = ROLL_AT,
                 create: bool = False) -> None:
        self.uri = target.uri
        self._session = ZooKeeperSession(target, create=create)
        self._client = self._session.client
        self._ids = ZooKeeperIdGenerator(self._session, roll_at=id_roll_at)
        self._registrations: list[ZooKeeperRegistration] = []
        self._lock = threading.Lock()
        self._closed = False
        try:
            ensure_instance_id(self)
        except BaseException:
            self._session.close()
            raise

    # --- ledgers ------------------------------------------------------------
    def new_ledger_id(self) -> int:
        return self._ids.next_id()

    def create_ledger(self, metadata: LedgerMetadata) -> int:
        ledger_id = names.check_ledger_id(metadata.ledger_id)
        self._session.call(f"create ledger {ledger_id}", self._client.create_async,
                           layout.ledger_path(ledger_id), names.encode_ledger(metadata),
                           makepath=True,
                           exists=MetadataExistsError(f"ledger {ledger_id} already exists in {self.uri}"))
        return 0

    def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        data, stat = self._session.call(f"read ledger {ledger_id}", self._client.get_async,
                                        layout.ledger_path(ledger_id),
                                        missing=self._no_ledger(ledger_id))
        return Versioned(LedgerMetadata.from_json(data), stat.version)

    def read_ledger_latest(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """A ZooKeeper server may lag its leader: ``sync`` first, so a create another client completed is seen."""
        path = layout.ledger_path(ledger_id)
        self._session.call(f"sync before reading ledger {ledger_id}", self._client.sync_async, path)
        return self.read_ledger(ledger_id)

    def write_ledger(self, metadata: LedgerMetadata, expected_version: int) -> int:
        ledger_id = names.check_ledger_id(metadata.ledger_id)
        names.check_version(expected_version)
        stat = self._session.call(f"write ledger {ledger_id}", self._client.set_async,
                                  layout.ledger_path(ledger_id), names.encode_ledger(metadata),
                                  expected_version, missing=self._no_ledger(ledger_id),
                                  conflict=self._ledger_conflict(ledger_id, expected_version))
        return stat.version

    def delete_ledger(self, ledger_id: int, expected_version: int | None = None) -> None:
        if expected_version is not None:
            names.check_version(expected_version)
        self._session.call(f"delete ledger {ledger_id}", self._client.delete_async,
                           layout.ledger_path(ledger_id),
                           -1 if expected_version is None else expected_version,
                           missing=self._no_ledger(ledger_id),
                           conflict=self._ledger_conflict(ledger_id, expected_version))

    def list_ledgers(self) -> Iterator[int]:
        yield from self._walk(layout.LEDGERS, [])

    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[Versioned[LedgerMetadata] | None], None]) -> Watch:
        names.check_ledger_id(ledger_id)
        return ZooKeeperLedgerWatch(self._session, ledger_id, callback).start()

    def _walk(self, path: str, parts: list[str]) -> Iterator[int]:
        depth = len(parts)
        try:
            children = self._session.call("list ledgers", self._client.get_children_async, path,
                                          missing=NoSuchKeyError(path))
        except NoSuchKeyError:
            return  # a directory removed while walking holds no ledgers
        for name in layout.level_names(children, depth):
            if depth == len(layout.LEVEL_WIDTHS):
                yield layout.ledger_id_from_parts(parts + [name])
            else:
                yield from self._walk(f"{path}/{name}", parts + [name])

    def _no_ledger(self, ledger_id: int) -> NoSuchLedgerError:
        return NoSuchLedgerError(f"ledger {ledger_id} does not exist in {self.uri}")

    def _ledger_conflict(self, ledger_id: int, expected: int | None) -> MetadataVersionConflictError:
        return MetadataVersionConflictError(
            f"ledger {ledger_id} in {self.uri} is no longer at version {expected}; re-read it and retry")

    # --- bookies ------------------------------------------------------------
    def register_bookie(self, bookie_id: str, info: Mapping[str, Any] | None = None,
                        read_only: bool = False) -> Registration:
        names.check_bookie_id(bookie_id)
        registration = ZooKeeperRegistration(self._session, bookie_id,
                                             names.encode_bookie_info(bookie_id, info), bool(read_only))
        registration.claim()
        with self._lock:
            self._registrations.append(registration)
        return registration

    def bookies(self, include_read_only: bool = True) -> dict[str, BookieRegistration]:
        found = read_bookies(self._session)
        return {k: v for k, v in found.items() if include_read_only or not v.read_only}

    def watch_bookies(self, callback: Callable[[dict[str, BookieRegistration]], None]) -> Watch:
        return ZooKeeperBookiesWatch(self._session, callback).start()

    # --- versioned keys -----------------------------------------------------
    def get(self, key: str) -> Versioned[bytes]:
        data, stat = self._session.call(f"read key {key!r}", self._client.get_async,
                                        layout.key_path(names.check_key(key)),
                                        missing=self._no_key(key))
        return Versioned(data, stat.version)

    def create(self, key: str, value: bytes) -> int:
        path = layout.key_path(names.check_key(key))
        self._session.call(f"create key {key!r}", self._client.create_async, path,
                           names.check_value(value, key), makepath=True,
                           exists=MetadataExistsError(f"metadata key {key!r} already exists in {self.uri}"))
        return 0

    def set(self, key: str, value: bytes, expected_version: int) -> int:
        path = layout.key_path(names.check_key(key))
        stat = self._session.call(f"write key {key!r}", self._client.set_async, path,
                                  names.check_value(value, key), names.check_version(expected_version),
                                  missing=self._no_key(key),
                                  conflict=self._key_conflict(key, expected_version))
        return stat.version

    def delete(self, key: str, expected_version: int | None = None) -> None:
        path = layout.key_path(names.check_key(key))
        version = -1 if expected_version is None else names.check_version(expected_version)
        self._session.call(f"delete key {key!r}", self._client.delete_async, path, version,
                           missing=self._no_key(key), conflict=self._key_conflict(key, expected_version))

    def children(self, key: str) -> list[str]:
        path = layout.key_path(names.check_key(key, allow_root=True))
        try:
            found = self._session.call(f"list key {key!r}", self._client.get_children_async, path,
                                       missing=self._no_key(key))
        except NoSuchKeyError:
            return []
        return sorted(found)

    def _no_key(self, key: str) -> NoSuchKeyError:
        return NoSuchKeyError(f"metadata key {key!r} does not exist in {self.uri}")

    def _key_conflict(self, key: str, expected: int | None) -> MetadataVersionConflictError:
        return MetadataVersionConflictError(
            f"metadata key {key!r} in {self.uri} is no longer at version {expected}; re-read it and retry")

    # --- lifecycle ----------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            registrations = list(self._registrations)
        try:
            for registration in registrations:
                try:
                    registration.close()
                except MetadataError:
                    log.warning("could not remove the registration of bookie %s from %s; it "
                                "goes with the session", registration.bookie_id, self.uri,
                                exc_info=True)
        finally:
            self._session.close()

    def __repr__(self) -> str:
        return f"ZooKeeperMetadataStore({self.uri!r})"
