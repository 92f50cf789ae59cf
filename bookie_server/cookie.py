"""The bookie cookie: ties a bookie id to one data directory (docs/protocol.md B3).

On first start the bookie writes a cookie (bookie id + random instance id)
into its data dir and under the metadata key ``cookies/<bookie_id>``. Later
starts compare the two and refuse to run when the data dir was wiped, is
missing, or belongs to another bookie: a bookie that silently comes back
empty would answer "no such entry" for entries it once acknowledged.

The local cookie is first written as ``COOKIE.json.pending``, then published
to the metadata store, then renamed to ``COOKIE.json``; a start that finds
a pending cookie equal to the published one finishes the rename, so a crash
between the two writes never locks the bookie out.

The cookie also ties the data dir to one metadata store: the instance id of
the store the bookie registered with is kept beside it (``store_record``).
A bookie whose data dir has a cookie refuses a store with another instance
id, or one that does not hold its cookie, with a line that names the
store it belongs to; ``--allow-new-data-dir`` never changes that. Moving a
bookie's data to another store takes ``--adopt-metadata-store ID`` naming
the new store's instance id (printed in the refusal). A bookie from before
instance ids records the store's id once its cookie matches the store's.

Checking and writing are two steps: ``plan_cookie`` only reads (and refuses
with DataDirectoryError), ``CookiePlan.commit`` writes. The server commits
only once the bookie is known to serve (port bound, storage open, gRPC
started): a start that fails before, e.g. on a port in use, changes no
cookie, so it cannot lock the real bookie out of its own data dir.
"""
from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from bookie_server.store_record import read_store_record, write_store_record, wrong_store_message
from pyspark_ledger.errors import (DataDirectoryError, InvalidConfigurationError, MetadataExistsError,
                                   MetadataVersionConflictError, NoSuchKeyError)
from pyspark_ledger.metadata.instance import ensure_instance_id, read_instance_id
from pyspark_ledger.metadata.store import MetadataStore

COOKIE_FILE = "COOKIE.json"
PENDING_FILE = "COOKIE.json.pending"
FORMAT_VERSION = 1
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cookie:
    bookie_id: str
    instance_id: str

    @classmethod
    def new(cls, bookie_id: str) -> "Cookie":
        return cls(bookie_id, uuid.uuid4().hex)

    def to_bytes(self) -> bytes:
        doc = {"format": FORMAT_VERSION, "bookie_id": self.bookie_id, "instance_id": self.instance_id}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> "Cookie":
        try:
            doc = json.loads(data)
            return cls(str(doc["bookie_id"]), str(doc["instance_id"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise DataDirectoryError(f"cookie {source} is unreadable ({exc}): restore it or remove the "
                                     "bookie's data dir and cookie to start it as a new bookie") from exc


def metadata_key(bookie_id: str) -> str:
    return f"cookies/{bookie_id}"


# What CookiePlan.commit does: nothing; rename the pending cookie; publish the local cookie; write a new one.
KEEP, FINISH_PENDING, PUBLISH_LOCAL, CREATE_NEW = "keep", "finish-pending", "publish-local", "create-new"


@dataclass(frozen=True)
class CookiePlan:
    """The outcome of checking a bookie's cookie: the cookie it runs with and what is left to write."""

    store: MetadataStore
    data_dir: Path
    cookie: Cookie
    action: str
    stored_version: int | None = None  # of the registered cookie that CREATE_NEW replaces
    record_store: bool = False  # write the store's instance id beside the cookie (new, older or moved bookie)

    def commit(self) -> Cookie:
        """Write what the plan needs (nothing for KEEP). DataDirectoryError if someone raced us."""
        self._commit_cookie()
        if self.record_store:
            instance = ensure_instance_id(self.store)
            write_store_record(self.data_dir, instance, self.store.uri)
            _log.info("bookie %s: its data belongs to metadata store %s (instance %s)", self.cookie.bookie_id,
                      self.store.uri, instance)
        return self.cookie

    def _commit_cookie(self) -> None:
        bookie_id, data_dir = self.cookie.bookie_id, self.data_dir
        if self.action == FINISH_PENDING:
            _log.info("finishing the cookie of bookie %s left pending by an interrupted first start", bookie_id)
            _finish_pending(data_dir)
        elif self.action == PUBLISH_LOCAL:
            _log.warning("publishing the cookie of data dir %s for bookie %s to the metadata store", data_dir,
                         bookie_id)
            _publish(self.store, bookie_id, self.cookie, None)
        elif self.action == CREATE_NEW:
            if self.stored_version is not None:
                _log.warning("bookie %s starts with a new, empty data dir %s (--allow-new-data-dir): entries it "
                             "stored before are lost", bookie_id, data_dir)
            data_dir.mkdir(parents=True, exist_ok=True)
            _write_atomic(data_dir / PENDING_FILE, self.cookie.to_bytes())
            _publish(self.store, bookie_id, self.cookie, self.stored_version)
            _finish_pending(data_dir)
            _log.info("bookie %s wrote a new cookie (instance %s) in %s", bookie_id, self.cookie.instance_id,
                      data_dir)


def verify_cookie(store: MetadataStore, data_dir: Path, bookie_id: str, allow_new_data_dir: bool = False,
                  adopt_store: str | None = None) -> Cookie:
    """Check (or on first start create) the cookie; DataDirectoryError when they disagree."""
    return plan_cookie(store, data_dir, bookie_id, allow_new_data_dir, adopt_store).commit()


def plan_cookie(store: MetadataStore, data_dir: Path, bookie_id: str,
                allow_new_data_dir: bool = False, adopt_store: str | None = None) -> CookiePlan:
    """Check the cookie and the store's identity without writing anything; DataDirectoryError when data dir
    and store disagree. ``adopt_store``: the instance id of a store this bookie's data knowingly moves to."""
    data_dir = Path(data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise DataDirectoryError(f"data dir {data_dir} exists but is not a directory")
    local = _read_file(data_dir / COOKIE_FILE)
    recorded = read_store_record(data_dir) if data_dir.is_dir() else None
    found = read_instance_id(store)
    if adopt_store is not None and adopt_store != found:
        raise InvalidConfigurationError(
            f"--adopt-metadata-store {adopt_store} does not name metadata store {store.uri} (instance "
            f"{found or 'none'}); nothing was changed")
    moving = adopt_store is not None and adopt_store != recorded
    if recorded is not None and recorded != found and not moving:
        raise DataDirectoryError(wrong_store_message(store.uri, data_dir, bookie_id, found, recorded))
    record = recorded is None or moving
    stored = _read_stored(store, bookie_id)
    if local is None:
        return replace(_without_local_cookie(store, data_dir, bookie_id, stored, allow_new_data_dir),
                       record_store=record)
    if local.bookie_id != bookie_id:
        raise DataDirectoryError(
            f"data dir {data_dir} belongs to bookie {local.bookie_id}, not {bookie_id}: "
            "start each bookie with its own data dir")
    if stored is None:
        if moving:
            return CookiePlan(store, data_dir, local, PUBLISH_LOCAL, record_store=True)
        if recorded is None:  # a bookie from before instance ids: only its cookie could tell the store
            raise DataDirectoryError(wrong_store_message(store.uri, data_dir, bookie_id, found, None))
        if not allow_new_data_dir:  # the very store it registered with lost the cookie key
            raise DataDirectoryError(
                f"metadata store {store.uri} is the one bookie {bookie_id} registered with (instance {found}) "
                f"but has lost its cookie; --allow-new-data-dir publishes the cookie of data dir {data_dir} "
                "again (no data is deleted)")
        return CookiePlan(store, data_dir, local, PUBLISH_LOCAL)
    if stored[0] != local:
        raise DataDirectoryError(
            f"cookie of data dir {data_dir} (instance {local.instance_id}) differs from the one registered for "
            f"bookie {bookie_id} (instance {stored[0].instance_id}): the data dir was swapped or re-created; "
            "start the bookie with its original data dir")
    return CookiePlan(store, data_dir, local, KEEP, record_store=record)


def _without_local_cookie(store: MetadataStore, data_dir: Path, bookie_id: str,
                          stored: tuple[Cookie, int] | None, allow_new_data_dir: bool) -> CookiePlan:
    pending = _read_file(data_dir / PENDING_FILE)
    if stored is not None and pending == stored[0]:
        return CookiePlan(store, data_dir, pending, FINISH_PENDING)
    if stored is not None and not allow_new_data_dir:
        raise DataDirectoryError(
            f"data dir {data_dir} has no cookie but bookie {bookie_id} ran before (instance "
            f"{stored[0].instance_id}): the data dir is missing or was wiped, so entries it acknowledged "
            "are gone. Start it with its original data dir, or pass --allow-new-data-dir to rejoin empty")
    return CookiePlan(store, data_dir, Cookie.new(bookie_id), CREATE_NEW, stored[1] if stored is not None else None)


def _read_file(path: Path) -> Cookie | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataDirectoryError(f"cannot read cookie {path}: {exc}") from exc
    return Cookie.from_bytes(data, str(path))


def _read_stored(store: MetadataStore, bookie_id: str) -> tuple[Cookie, int] | None:
    try:
        versioned = store.get(metadata_key(bookie_id))
    except NoSuchKeyError:
        return None
    return Cookie.from_bytes(versioned.value, f"{metadata_key(bookie_id)} in {store.uri}"), versioned.version


def _publish(store: MetadataStore, bookie_id: str, cookie: Cookie, version: int | None) -> None:
    try:
        if version is None:
            store.create(metadata_key(bookie_id), cookie.to_bytes())
        else:
            store.set(metadata_key(bookie_id), cookie.to_bytes(), version)
    except (MetadataExistsError, MetadataVersionConflictError, NoSuchKeyError) as exc:
        raise DataDirectoryError(f"another process changed the cookie of bookie {bookie_id} "
                                 "while this one started: is the bookie already starting elsewhere?") from exc


def _finish_pending(data_dir: Path) -> None:
    os.replace(data_dir / PENDING_FILE, data_dir / COOKIE_FILE)
    _fsync_dir(data_dir)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
