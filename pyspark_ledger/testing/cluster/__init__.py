"""A cluster of test hosts in network namespaces on this machine (issue 17); see docs/cluster.md.

``NetnsCluster(default_spec())`` makes one namespace per host joined by a
bridge, and starts a ZooKeeper ensemble, bookies over two zones, a Spark
standalone master with workers, and an empty driver host; ``python -m
pyspark_ledger.testing.cluster up|down|demo`` does the same by hand. Needs root.
"""
from pyspark_ledger.testing.cluster.cluster import NetnsCluster
from pyspark_ledger.testing.cluster.netns import netns_unavailable_reason
from pyspark_ledger.testing.cluster.spec import ClusterSpec, HostSpec, default_spec

__all__ = ["ClusterSpec", "HostSpec", "NetnsCluster", "default_spec", "netns_unavailable_reason"]
