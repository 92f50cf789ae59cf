"""What the fault clusters share: the part of the Jepsen runner's cluster that is not hosts or network.

``LocalFaultCluster`` (bookies behind proxies on 127.0.0.1) and ``cluster.fault_cluster.NetnsFaultCluster``
(the namespace cluster) fill in ``hosts`` (name -> ``hosts.Host``), ``metadata_uri`` and ``addresses``
(bookie id -> the address clients dial) and inherit:

- ``roles()``: host name -> role;
- ``open_store()``: a metadata store for a client, a ``HookedStore`` that records every ledger version
  written through it (the runner's checker reads them), closed with the cluster (``close_stores()``).
  Every bookie registers the address clients dial (its host's, or its proxy's with ``--advertised-port``),
  so the store is the plain one; a subclass whose bookies do not overrides ``wrap_store``.
"""
from __future__ import annotations

from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.testing.faults.hosts import Host
from pyspark_ledger.testing.metadata_hooks import HookedStore


class FaultClusterBase:
    """See the module docstring."""

    hosts: dict[str, Host]
    metadata_uri: str
    addresses: dict[str, str]

    def __init__(self) -> None:
        self._stores: list[HookedStore] = []

    def roles(self) -> dict[str, str]:
        return {name: host.role for name, host in self.hosts.items()}

    def open_store(self) -> HookedStore:
        """A metadata store for a client, closed by ``close_stores()`` if the caller does not."""
        store = self.wrap_store(open_metadata_store(self.metadata_uri))
        self._stores.append(store)
        return store

    def wrap_store(self, store: MetadataStore) -> HookedStore:
        return HookedStore(store)

    def close_stores(self) -> None:
        for store in self._stores:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing everything anyway
                pass
        self._stores.clear()
