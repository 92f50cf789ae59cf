"""The public client: create, open, recover, inspect and delete ledgers.

``LedgerClient("sqlite:///tmp/meta.db")`` or ``LedgerClient("zk://127.0.0.1:2181/ledgers")``
connects to the metadata store and reaches the bookies it registers through
gRPC; ``transport=`` plugs in another ``BookieTransport`` (the in-memory
fakes of ``pyspark_ledger.testing.fake_bookies``), and a ``MetadataStore``
object may be passed instead of a URI (the caller keeps owning it).
``close()`` stops every thread the client started: open writers are
aborted (their pending adds fail; their ledgers stay OPEN for recovery).
"""
from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.ledger_secrets import LedgerSecrets
from pyspark_ledger.client.metadata_ops import create_ledger, delete_ledger_metadata
from pyspark_ledger.client.metadata_update import retry_policy
from pyspark_ledger.client.lazy_transport import LazyGrpcTransport
from pyspark_ledger.entry import check_digest_type, verify_password
from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError, LedgerClosedError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.model import LedgerMetadata, check_quorums
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.protocol.schedule import Quorums

if TYPE_CHECKING:  # the modules that talk to bookies are imported when first needed (lazy_transport)
    from pyspark_ledger.client.reader import LedgerReader
    from pyspark_ledger.client.rereplicate import RereplicationReport
    from pyspark_ledger.client.transport import BookieTransport
    from pyspark_ledger.client.writer import LedgerWriter

log = logging.getLogger(__name__)


class LedgerClient:
    """Entry point of the replication client (see the module docstring)."""

    def __init__(self, metadata: str | MetadataStore, config: ClientConfig | None = None, *,
                 transport: BookieTransport | None = None) -> None:
        config = ClientConfig() if config is None else config
        if not isinstance(config, ClientConfig):
            raise InvalidArgumentError(f"config must be a ClientConfig, got {type(config).__name__}")
        if transport is None and config.tls is not None and config.tls.enabled:
            config.tls.channel_credentials()  # an unusable TLS file fails first, naming its setting
        if isinstance(metadata, MetadataStore):
            store, self._owns_store = metadata, False
        elif isinstance(metadata, str):
            store, self._owns_store = open_metadata_store(metadata), True
        else:
            raise InvalidConfigurationError(
                "LedgerClient needs a metadata URI such as 'sqlite:///abs/path/meta.db' or "
                f"'zk://127.0.0.1:2181/ledgers' (or a MetadataStore), got {metadata!r}")
        try:
            self._secrets = LedgerSecrets(store, config.repair_key_file)
        except BaseException:
            if self._owns_store:
                store.close()
            raise
        if transport is None:
            settings = dict(io_threads=config.io_threads, timeout=config.read_timeout_s,
                            max_batch_bytes=config.max_batch_bytes,
                            max_batches_in_flight=config.add_batches_in_flight, tls=config.tls,
                            answer_runs=config.add_answer_runs, framed_adds=config.framed_adds,
                            framed_reads=config.framed_reads)
            try:
                if config.tls is not None and config.tls.enabled:
                    from pyspark_ledger.client.transport import GrpcTransport
                    transport = GrpcTransport(store, **settings)
                else:  # made on first use: metadata-only work (Spark planning, commits) never imports gRPC
                    transport = LazyGrpcTransport(store, **settings)
            except BaseException:  # e.g. a TLS file that cannot be used
                if self._owns_store:
                    store.close()
                raise
        self._ctx = ClientContext(store=store, transport=transport, config=config,
                                  rng=random.Random(config.placement_seed))
        self._lock = threading.Lock()
        self._writers: set[LedgerWriter] = set()
        self._closed = False

    @property
    def config(self) -> ClientConfig:
        return self._ctx.config

    # --- ledgers --------------------------------------------------------------------
    def create_ledger(self, ensemble_size: int = 3, write_quorum: int | None = None,
                      ack_quorum: int | None = None, password: bytes = b"", digest: str = "crc32c",
                      custom_metadata: Mapping[str, bytes] | None = None) -> LedgerWriter:
        """A new OPEN ledger on ``ensemble_size`` writable bookies; returns its writer.

        ``write_quorum`` defaults to the ensemble size, ``ack_quorum`` to a majority of it.
        """
        self._check_open()
        write_quorum = ensemble_size if write_quorum is None else write_quorum
        ack_quorum = (write_quorum // 2 + 1 if isinstance(write_quorum, int) else write_quorum) \
            if ack_quorum is None else ack_quorum
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        password = _password(password)
        digest = check_digest_type(digest)
        custom = _custom_metadata(custom_metadata)
        ensemble = self._ctx.choose_ensemble(ensemble_size,
                                             quorums=Quorums(ensemble_size, write_quorum, ack_quorum))
        created = create_ledger(self._ctx.store, ensemble, write_quorum, ack_quorum, digest, password, custom,
                                retry_policy(self.config), seal=self._secrets.seal)
        from pyspark_ledger.client.writer import LedgerWriter
        writer = LedgerWriter(self._ctx, created, password, on_close=self._forget)
        with self._lock:
            self._writers.add(writer)
        return writer

    def open_ledger(self, ledger_id: int, password: bytes = b"", recovery: bool = True) -> LedgerReader:
        """Open a ledger to read it.

        ``recovery=True`` fences and recovers a ledger that is not CLOSED (its writer, if
        alive, fails with LedgerFencedError) and closes it; ``recovery=False`` neither
        fences nor closes and reads up to the last add confirmed (tailing reader).
        UnauthorizedError for a wrong password, NoSuchLedgerError for an unknown id.
        """
        self._check_open()
        password = _password(password)
        stored = self._ctx.store.read_ledger(_ledger_id(ledger_id))
        verify_password(password, stored.value.password_check)
        from pyspark_ledger.client.reader import open_reader
        return open_reader(self._ctx, stored, password, recovery)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """The stored metadata (state, quorums, last entry, length, fragments)."""
        self._check_open()
        return self._ctx.store.read_ledger(_ledger_id(ledger_id)).value

    def rereplicate(self, ledger_id: int, password: bytes | None = None, lost_bookies: list[str] | None = None,
                    *, passwords: Sequence[bytes] = (),
                    on_progress: Callable[[int, int, int], None] | None = None) -> RereplicationReport:
        """Copy what lost bookies held of the ledger's sealed fragments to replacements, then record them.

        The ledger's password: ``password`` if given (checked), else its secret sealed to the cluster's
        repair key (a client configured with ``repair_key_file``), else the first of ``passwords`` that
        matches it. ``lost_bookies`` defaults to every bookie the fragments name that is not
        registered now. The last fragment of a ledger that is not CLOSED is left to its writer
        (listed in the report). UnauthorizedError when no password opens it (the message says what
        is missing), DataLossError if an entry has no readable replica left, NotEnoughBookiesError
        if no replacement is free. ``on_progress(ledger_id, copied, total)``, if given, hears how many of
        the entries to copy are copied (first with 0, then as copies are acknowledged).
        """
        self._check_open()
        ledger_id = _ledger_id(ledger_id)
        secret = self.repair_password(ledger_id, password, passwords)
        from pyspark_ledger.client.rereplicate import rereplicate_ledger
        return rereplicate_ledger(self._ctx, ledger_id, secret, lost_bookies, on_progress)

    def recover_ledger(self, ledger_id: int, password: bytes | None = None, *,
                       passwords: Sequence[bytes] = ()) -> LedgerMetadata:
        """Fence and close a ledger whose writer died (as ``open_ledger(recovery=True)``), finding its
        password as ``rereplicate`` does; its metadata afterwards."""
        self._check_open()
        ledger_id = _ledger_id(ledger_id)
        secret = self.repair_password(ledger_id, password, passwords)
        stored = self._ctx.store.read_ledger(ledger_id)
        from pyspark_ledger.client.reader import open_reader
        open_reader(self._ctx, stored, secret, True).close()
        return self._ctx.store.read_ledger(ledger_id).value

    def repair_password(self, ledger_id: int, password: bytes | None = None,
                        passwords: Sequence[bytes] = ()) -> bytes:
        """The ledger's password for an administrative operation (see ``rereplicate``)."""
        self._check_open()
        metadata = self._ctx.store.read_ledger(_ledger_id(ledger_id)).value
        given = None if password is None else _password(password)
        return self._secrets.password_for(metadata, given, [_password(p) for p in _candidates(passwords)])

    def delete_ledger(self, ledger_id: int, password: bytes | None = None) -> None:
        """Remove the ledger's metadata (bookies then reclaim its entries for good).

        Needs authority: the ledger's ``password`` (a ledger created without one needs none), or a
        client holding the cluster's repair key (``ClientConfig.repair_key_file``) that opens the
        ledger's sealed secret; else UnauthorizedError. NoSuchLedgerError if unknown.
        """
        self._check_open()
        ledger_id = _ledger_id(ledger_id)
        given = None if password is None else _password(password)
        delete_ledger_metadata(self._ctx.store, ledger_id,
                               lambda stored: self._secrets.authorize_delete(stored, given), retry_policy(self.config))

    @property
    def repair_key_id(self) -> str | None:
        """The id of the repair key this client holds, or None."""
        key = self._secrets.repair_key
        return None if key is None else key.key_id

    def list_ledgers(self) -> list[int]:
        self._check_open()
        return list(self._ctx.store.list_ledgers())

    def bookies(self, writable_only: bool = False) -> list[str]:
        """Ids of the registered bookies (only the writable ones with ``writable_only``), sorted."""
        self._check_open()
        return self._ctx.transport.bookies(include_read_only=not writable_only)

    # --- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Abort open writers, stop every thread of this client, close connections; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            writers, self._writers = list(self._writers), set()
        for writer in writers:
            writer.abort()
        self._ctx.close()
        self._ctx.transport.close()
        if self._owns_store:
            self._ctx.store.close()

    def __enter__(self) -> "LedgerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _forget(self, writer: LedgerWriter) -> None:
        with self._lock:
            self._writers.discard(writer)

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("this LedgerClient is closed; create a new one")


def _password(password) -> bytes:
    if isinstance(password, str):
        return password.encode()
    if isinstance(password, (bytes, bytearray, memoryview)):
        return bytes(password)
    raise InvalidArgumentError(f"password must be bytes (or str), got {type(password).__name__}")


def _candidates(passwords) -> list:
    if isinstance(passwords, (bytes, bytearray, str)):
        return [passwords]
    return list(passwords)


def _ledger_id(ledger_id) -> int:
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int) or not 0 <= ledger_id < 2**63:
        raise InvalidArgumentError(f"ledger id must be an integer in 0..2**63-1, got {ledger_id!r}")
    return ledger_id


def _custom_metadata(custom) -> dict[str, bytes]:
    if custom is None:
        return {}
    if not isinstance(custom, Mapping):
        raise InvalidArgumentError(f"custom_metadata must be a mapping of str to bytes, got {custom!r}")
    result = {}
    for key, value in custom.items():
        if not isinstance(key, str) or not isinstance(value, (bytes, bytearray)):
            raise InvalidArgumentError(
                f"custom_metadata must map str to bytes; {key!r} -> {type(value).__name__} is not allowed "
                "(encode values, e.g. 'x'.encode())")
        result[key] = bytes(value)
    return result
