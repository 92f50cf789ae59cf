"""A kazoo session for one ZooKeeper metadata store, with errors translated.

Connects (bounded); with ``create=True`` (bookies) creates the chroot and the
layout's roots if missing, otherwise raises NoSuchMetadataStoreError when the
chroot has no ``/ledgers`` (and creates nothing); runs every request with a bounded wait, and turns every kazoo exception into
the ``pyspark_ledger.errors`` tree with a message naming the URI. It owns the
store's one background task thread, which runs watch refreshes and user
callbacks, and the reconnect hooks: after the connection comes back (same or
new session) each hook runs there, so watches are set again and ephemeral
registrations re-created.

Security (see ``zk_security``): with credentials every node the session
creates (the chroot and its parents included) gets a digest ACL for them
alone; opening checks that the layout's roots can be read, so a store
without or with the wrong credentials fails at once with
MetadataUnauthorizedError, as does any later request refused for lack of
rights.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (AuthFailedError, BadVersionError, KazooException, NoAuthError,
                              NoNodeError, NodeExistsError, NotEmptyError, RolledBackError)
from kazoo.security import Permissions
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from pyspark_ledger.errors import (LedgerError, MetadataError, MetadataExistsError,
                                   MetadataUnauthorizedError, MetadataVersionConflictError,
                                   NoSuchMetadataStoreError)
from pyspark_ledger.metadata import layout
from pyspark_ledger.metadata.uri import ZooKeeperTarget
from pyspark_ledger.metadata.zk_security import AUTH_ENV, kazoo_options, resolve_credentials
from pyspark_ledger.metadata.workers import TaskThread, run_callback

log = logging.getLogger(__name__)
MIN_OP_TIMEOUT = 2.0  # seconds a request or the first connect may wait, at least
RECONNECT_MAX_DELAY = 1.0  # kazoo's default backoff grows to 60 s; reconnect within a session


class ZooKeeperSession:
    """One kazoo client, chrooted, with bounded calls and reconnect hooks."""

    def __init__(self, target: ZooKeeperTarget, *, create: bool = False) -> None:
        self.uri = target.uri
        self._tls = target.tls
        self._credentials = resolve_credentials(target)
        self.session_timeout = target.session_timeout
        self.op_timeout = max(target.session_timeout, MIN_OP_TIMEOUT)
        self.tasks = TaskThread(f"zk-metadata-{target.connect_string}")
        self._hooks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._disconnected = False
        self._closed = False
        reconnect = KazooRetry(max_tries=-1, max_delay=RECONNECT_MAX_DELAY)
        self.client = KazooClient(hosts=target.connect_string, timeout=target.session_timeout,
                                  connection_retry=reconnect,
                                  **kazoo_options(target, self._credentials))
        self._connect(target.chroot, create)

    @property
    def session_id(self) -> int | None:
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    def call(self, what: str, method: Callable[..., Any], *args: Any,
             missing: LedgerError | None = None, exists: LedgerError | None = None,
             conflict: LedgerError | None = None, **kwargs: Any) -> Any:
        """Run a kazoo ``*_async`` method and wait (bounded) for its result.

        ``missing``/``exists``/``conflict`` are raised for NoNode/NodeExists/
        BadVersion; other failures become MetadataError naming ``what``.
        """
        self._check_open(what)
        try:
            result = method(*args, **kwargs)
        except (KazooException, KazooTimeoutError) as exc:
            raise self._translate(exc, what, missing, exists, conflict) from exc
        return self.wait(what, result, missing=missing, exists=exists, conflict=conflict)

    def wait(self, what: str, result: Any, *, missing: LedgerError | None = None,
             exists: LedgerError | None = None, conflict: LedgerError | None = None) -> Any:
        """Wait (bounded) for a kazoo async result, translating its failure like ``call``."""
        try:
            return result.get(timeout=self.op_timeout)
        except (KazooException, KazooTimeoutError) as exc:
            raise self._translate(exc, what, missing, exists, conflict) from exc

    def check_transaction(self, what: str, results: list[Any], **outcomes: LedgerError | None) -> None:
        """Raise the translated error of the operation that failed a transaction, if any."""
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise self._translate(result, what, outcomes.get("missing"), outcomes.get("exists"),
                                      outcomes.get("conflict")) from result

    def add_reconnect_hook(self, hook: Callable[[], None]) -> None:
        with self._lock:
            self._hooks.append(hook)

    def remove_reconnect_hook(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)

    def close(self) -> None:
        """End the session (its ephemeral nodes go with it) and join the task thread."""
        self._closed = True
        self.client.remove_listener(self._on_state)
        try:
            self.client.stop()
        finally:
            self.tasks.close()
            self.client.close()

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise MetadataError(f"{what}: metadata store {self.uri} is closed")

    def _connect(self, chroot: str, create: bool) -> None:
        connect_timeout = self.op_timeout
        try:
            self.client.start(timeout=connect_timeout)
        except (KazooException, KazooTimeoutError) as exc:
            hint = ("with TLS (tls=1): check that the port is ZooKeeper's secureClientPort and that "
                    "tls_ca verifies its certificate" if self._tls else
                    "if the server only offers TLS (a secureClientPort), add tls=1 and tls_ca=")
            raise MetadataError(
                f"cannot connect to ZooKeeper at {self.uri} within {connect_timeout:g} s; "
                f"check that ZooKeeper is running and the host:port list is right; {hint}") from exc
        try:
            if not create:
                self._check_exists(chroot)
            if chroot:
                self.call(f"create chroot {chroot}", self.client.ensure_path_async, chroot)
                self.client.chroot = chroot  # every later path is relative to it
            for root in layout.ROOTS:
                self.call(f"create {root}", self.client.ensure_path_async, root)
            self._check_access()
        except BaseException:
            self.client.stop()
            self.client.close()
            raise
        self.client.add_listener(self._on_state)

    def _check_exists(self, chroot: str) -> None:
        """NoSuchMetadataStoreError unless the chroot holds the layout (before anything is created)."""
        where = chroot + layout.LEDGERS
        if self.call(f"look for {where}", self.client.exists_async, where) is None:
            raise NoSuchMetadataStoreError(
                f"no metadata store at {self.uri}: ZooKeeper has no {where}; nothing was created. "
                "Check the chroot, or create the store by starting a bookie "
                "(bookie-server --metadata URI)")

    def _check_access(self) -> None:
        """Fail now if the roots cannot be read; warn if credentials are set but the roots are open."""
        reads = [(root, self.client.get_async(root)) for root in layout.ROOTS]  # needs READ, small
        for root, result in reads:
            self.wait(f"read {root}", result)
        if self._credentials is None:
            return
        acls = [(root, self.client.get_acls_async(root)) for root in layout.ROOTS]
        open_roots = [root for root, result in acls
                      if any(acl.id.scheme == "world" and acl.perms & Permissions.READ
                             for acl in self.wait(f"read the ACL of {root}", result)[0])]
        if open_roots:
            log.warning("%s: %s were created without ACLs and stay readable and writable by anyone; "
                        "new znodes are protected by the digest of user %r. Protect the existing "
                        "ones with ZooKeeper's setAcl (e.g. zkCli.sh setAcl -R) or start a new chroot",
                        self.uri, ", ".join(open_roots), self._credentials.user)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: record and hand work to our thread only.
        if state == KazooState.CONNECTED:
            if self._disconnected:
                self._disconnected = False
                self.tasks.submit(self._run_hooks)
            return
        self._disconnected = True
        if state == KazooState.LOST:
            log.warning("ZooKeeper session of %s expired; watches and registrations are restored "
                        "when a new session is established", self.uri)

    def _run_hooks(self) -> None:
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            run_callback(hook, what="ZooKeeper reconnect")

    def _translate(self, exc: Exception, what: str, missing: LedgerError | None,
                   exists: LedgerError | None, conflict: LedgerError | None) -> LedgerError:
        if isinstance(exc, (NoAuthError, AuthFailedError)):
            return self._unauthorized(what)
        if isinstance(exc, NoNodeError):
            return missing or MetadataError(f"{what}: a parent node is missing in {self.uri}")
        if isinstance(exc, NodeExistsError):
            return exists or MetadataExistsError(f"{what}: already exists in {self.uri}")
        if isinstance(exc, BadVersionError):
            return conflict or MetadataVersionConflictError(
                f"{what}: the stored version changed in {self.uri}; re-read and retry")
        if isinstance(exc, NotEmptyError):
            return MetadataError(f"{what}: it has children in {self.uri}; delete them first")
        return MetadataError(
            f"{what}: ZooKeeper at {self.uri} failed or did not answer within "
            f"{self.op_timeout:g} s ({type(exc).__name__}: {exc}); a write may or may not "
            "have been applied — re-read before retrying")

    def _unauthorized(self, what: str) -> MetadataUnauthorizedError:
        who = (f"the credentials of user {self._credentials.user!r} from {self._credentials.source} "
               "are not allowed" if self._credentials else "no credentials were given")
        return MetadataUnauthorizedError(
            f"{what}: refused by ZooKeeper at {self.uri}: its znodes are protected by digest ACLs "
            f"and {who}; set {AUTH_ENV}=user:password (or auth_file= in the URI) to the store's "
            "credentials")
