"""Metadata stores (ZooKeeper, SQLite) behind one interface; see ``store.py``.

``open_metadata_store(uri)`` is the one way to get a store::

    sqlite:///abs/path/metadata.db[?lease_seconds=10&poll_interval=0.5]
    zk://host:port[,host:port]/chroot[?session_timeout=10][&auth_file=/abs/file]
        [&tls=1&tls_ca=/abs/ca.pem[&tls_cert=/abs/cert.pem&tls_key=/abs/key.pem]]

ZooKeeper credentials (digest ACLs) come from ``auth_file`` or the environment
variable ``LEDGER_ZK_AUTH`` (see ``zk_security``), never from the URI itself.
"""
from __future__ import annotations

from pyspark_ledger.metadata.store import (BookieRegistration, MetadataStore, Registration,
                                           Versioned, Watch)
from pyspark_ledger.metadata.uri import SqliteTarget, ZooKeeperTarget, parse_metadata_uri


def open_metadata_store(uri: str, *, create: bool = False) -> MetadataStore:
    """Connect to the store named by ``uri``; with ``create=True``, create it if missing.

    Only what sets a cluster up creates a store: a bookie's start and the sandbox.
    Clients, Spark reads and writes and the ``ledger`` CLI open with ``create=False``
    and get NoSuchMetadataStoreError, naming the path, when there is none (a
    mistyped path must not become a new, empty store).
    InvalidConfigurationError if the URI is malformed; MetadataError if the
    store cannot be opened or reached.
    """
    target = parse_metadata_uri(uri)
    if isinstance(target, SqliteTarget):
        from pyspark_ledger.metadata.sqlite import SqliteMetadataStore
        return SqliteMetadataStore(target, create=create)
    from pyspark_ledger.metadata.zookeeper import ZooKeeperMetadataStore
    return ZooKeeperMetadataStore(target, create=create)


__all__ = ["BookieRegistration", "MetadataStore", "Registration", "SqliteTarget", "Versioned",
           "Watch", "ZooKeeperTarget", "open_metadata_store", "parse_metadata_uri"]
