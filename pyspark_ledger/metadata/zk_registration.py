"""Bookie liveness in the ZooKeeper backend: ephemeral znodes, and their listing.

A writable bookie is ``/bookies/available/<id>``, a read-only one
``/bookies/readonly/<id>``; switching moves the node in one multi-op
transaction, so a bookie is never listed twice or not at all. The node belongs
to the store's session: if the process dies it vanishes at session expiry.

Registering waits (up to 1.5 times this store's session timeout) for a node
left by a dead predecessor to vanish, then fails with MetadataExistsError.

Session loss: kazoo reconnects with a new session; a reconnect hook then
re-creates the node. If another live session holds the id by then, the
registration is marked ``lost`` and an error logged (the bookie should
re-register or stop).

A switch whose outcome is unknown (it timed out while ZooKeeper was away, and
may still be applied when the session comes back) leaves the registration
*unsettled*: the next switch, whatever mode it asks for, and the reconnect hook
look at both nodes and make the store hold exactly the node of the mode wanted
(``_settle``), so a bookie is never listed under both directories.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Mapping

from pyspark_ledger.errors import MetadataError, MetadataExistsError, NoSuchKeyError
from pyspark_ledger.metadata import layout
from pyspark_ledger.metadata.names import decode_bookie, encode_bookie_info
from pyspark_ledger.metadata.store import BookieRegistration, Registration
from pyspark_ledger.metadata.zk_session import ZooKeeperSession

log = logging.getLogger(__name__)
EXPIRY_WAIT_FACTOR = 1.5  # wait up to 1.5 session timeouts for a predecessor's node to go


class ZooKeeperRegistration(Registration):
    """An ephemeral znode announcing one bookie, kept until ``close()``."""

    def __init__(self, session: ZooKeeperSession, bookie_id: str, info: bytes,
                 read_only: bool) -> None:
        self.bookie_id = bookie_id
        self._session = session
        self._info = info
        self._read_only = read_only
        self._lock = threading.Lock()
        self._lost = False
        self._closed = False
        self._unsettled = False  # a switch failed: the store may hold the other mode's node, or both

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def lost(self) -> bool:
        """True once another live session took this bookie id over."""
        return self._lost

    def claim(self) -> None:
        """Create the node, waiting (bounded) for a dead predecessor's node to go."""
        wait = self._session.session_timeout * EXPIRY_WAIT_FACTOR
        deadline = time.monotonic() + wait
        while True:
            gone = threading.Event()
            owner = self._current_owner(watch=lambda _event: gone.set())
            if owner is None and self._try_create():
                self._session.add_reconnect_hook(self._restore)
                return
            if owner is not None and owner == self._session.session_id:
                raise self._exists_error("a registration of this same store")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._exists_error(f"another session that did not expire within {wait:g} s "
                                         "(a live bookie, or a dead one with a longer session)")
            gone.wait(min(remaining, 0.5))

    def set_read_only(self, read_only: bool) -> None:
        read_only = bool(read_only)
        with self._lock:
            if self._closed or self._lost:
                raise MetadataError(f"registration of bookie {self.bookie_id!r} is "
                                    f"{'closed' if self._closed else 'lost'}")
            if read_only == self._read_only and not self._unsettled:
                return
            what = f"switch bookie {self.bookie_id!r} to {'read-only' if read_only else 'writable'}"
            self._unsettled = True  # until the store is seen holding exactly the node wanted
            self._settle(read_only, what)
            self._read_only = read_only
            self._unsettled = False

    def _settle(self, read_only: bool, what: str) -> bool:
        """Make the store hold this session's node for ``read_only`` and nothing for the other mode, in one
        transaction; True if anything had to change. Another session's node for this id: ``lost``."""
        client = self._session.client
        want = layout.bookie_path(self.bookie_id, read_only)
        other = layout.bookie_path(self.bookie_id, not read_only)
        owners = {}
        for path in (want, other):
            stat = self._session.call(f"look up bookie {self.bookie_id!r}", client.exists_async, path)
            owners[path] = None if stat is None else stat.ephemeralOwner
        if any(owner not in (None, self._session.session_id) for owner in owners.values()):
            self._lost = True
            log.error("registration of bookie %r in %s was lost: another live process holds this bookie id now; "
                      "stop this bookie or register again", self.bookie_id, self._session.uri)
            raise MetadataError(f"{what}: another live process holds bookie id {self.bookie_id!r} in "
                                f"{self._session.uri}")
        if owners[want] is not None and owners[other] is None:
            return False
        transaction = client.transaction()
        if owners[want] is None:
            transaction.create(want, self._info, ephemeral=True)
        if owners[other] is not None:
            transaction.delete(other)
        results = self._session.call(what, transaction.commit_async)
        self._session.check_transaction(what, results, missing=MetadataError(
            f"{what}: its node is not in {self._session.uri} right now (the session was lost "
            "and is being restored); retry"))
        return True

    def update_info(self, info: Mapping[str, Any]) -> None:
        data = encode_bookie_info(self.bookie_id, info)
        with self._lock:
            if self._closed or self._lost:
                raise MetadataError(f"registration of bookie {self.bookie_id!r} is "
                                    f"{'closed' if self._closed else 'lost'}")
            self._info = data  # a node re-created after a session loss carries it too
            path = layout.bookie_path(self.bookie_id, self._read_only)
            self._session.call(f"update the registration of bookie {self.bookie_id!r}",
                               self._session.client.set_async, path, data, missing=MetadataError(
                                   f"the registration of bookie {self.bookie_id!r} is not in {self._session.uri} "
                                   "right now (the session was lost and is being restored); retry"))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._session.remove_reconnect_hook(self._restore)
        if self._lost:
            return
        path = layout.bookie_path(self.bookie_id, self._read_only)
        try:
            self._session.call(f"unregister bookie {self.bookie_id!r}",
                               self._session.client.delete_async, path,
                               missing=NoSuchKeyError(path))
        except NoSuchKeyError:
            pass  # already gone with an expired session

    def _try_create(self) -> bool:
        path = layout.bookie_path(self.bookie_id, self._read_only)
        try:
            self._session.call(f"register bookie {self.bookie_id!r}",
                               self._session.client.create_async, path, self._info, ephemeral=True,
                               exists=MetadataExistsError(path))
        except MetadataExistsError:
            return False
        return True

    def _current_owner(self, watch) -> int | None:
        """The session owning either of the id's nodes (setting ``watch`` on both), or None."""
        owner = None
        for read_only in (False, True):
            path = layout.bookie_path(self.bookie_id, read_only)
            stat = self._session.call(f"look up bookie {self.bookie_id!r}",
                                      self._session.client.exists_async, path, watch=watch)
            if stat is not None:
                owner = stat.ephemeralOwner
        return owner

    def _restore(self) -> None:
        """Reconnect hook: the store must hold this session's node for the mode last confirmed, and only it
        (the session that held it may be gone, and a switch that failed may have been applied after all)."""
        with self._lock:
            if self._closed or self._lost:
                return
            try:
                changed = self._settle(self._read_only, f"restore the registration of bookie {self.bookie_id!r}")
            except MetadataError as exc:
                if not self._lost:  # ZooKeeper went away again: the next switch or reconnect settles it
                    self._unsettled = True
                    log.warning("could not restore the registration of bookie %s in %s yet: %s",
                                self.bookie_id, self._session.uri, exc)
                return
            self._unsettled = False
            if changed:
                log.warning("re-registered bookie %s in %s after a ZooKeeper session loss",
                            self.bookie_id, self._session.uri)

    def _exists_error(self, holder: str) -> MetadataExistsError:
        return MetadataExistsError(
            f"bookie {self.bookie_id!r} is already registered in {self._session.uri} by {holder}; "
            "stop that bookie or use another bookie id")


def read_bookies(session: ZooKeeperSession, watch=None) -> dict[str, BookieRegistration]:
    """The registered bookies by id; ``watch`` (if given) is set on both directories."""
    found: dict[str, BookieRegistration] = {}
    for read_only in (False, True):
        directory = layout.BOOKIES_READONLY if read_only else layout.BOOKIES_AVAILABLE
        names_ = session.call("list bookies", session.client.get_children_async, directory,
                              watch=watch)
        pending = [(name, session.client.get_async(f"{directory}/{name}")) for name in sorted(names_)]
        for name, result in pending:
            try:
                data, _stat = session.wait(f"read bookie {name!r}", result,
                                           missing=NoSuchKeyError(name))
            except NoSuchKeyError:
                continue  # went away between listing and reading
            found[name] = decode_bookie(name, data, read_only)
    return dict(sorted(found.items()))
