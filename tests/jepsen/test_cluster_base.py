"""The fault clusters' shared part (``testing/faults/cluster_base.py``): the stores they hand out.

On the local cluster every bookie registers its proxy's address (``--advertised-port``), so the plain
metadata store already tells a client to dial the proxy and ``open_store()`` is a ``HookedStore`` (it
records every ledger version) without rewriting registrations; ``advertise_proxies=False`` keeps the old
way, the registrations rewritten by ``AdvertisedStore``. One real bookie behind its proxy.
"""
from __future__ import annotations

import pytest

from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.faults.hosts import AdvertisedStore
from pyspark_ledger.testing.faults.local_cluster import LocalFaultCluster
from pyspark_ledger.testing.metadata_hooks import HookedStore


def dialled(registration) -> str:
    return f"{registration.info['host']}:{registration.info['port']}"


@pytest.mark.parametrize("advertise", [True, False])
def test_clients_dial_the_proxies_and_the_stores_record_versions(tmp_path, advertise):
    with LocalFaultCluster(tmp_path / "cluster", 1, advertise_proxies=advertise) as cluster:
        [(bookie_id, proxy)] = cluster.addresses.items()
        store = cluster.open_store()
        assert isinstance(store, HookedStore) and isinstance(store, AdvertisedStore) is not advertise
        assert dialled(store.bookies()[bookie_id]) == proxy
        with open_metadata_store(cluster.metadata_uri) as plain:
            own = dialled(plain.bookies()[bookie_id])
        assert (own == proxy) is advertise, "the bookie registers its proxy only with advertise_proxies"
    assert cluster._stores == [], "close() closed the stores it handed out"
