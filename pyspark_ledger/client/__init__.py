"""The replication client: the public ``LedgerClient`` and the seam to one bookie (``bookie_rpc``).

* ``ledger_client`` -- the public API (create, open, recover, inspect, delete ledgers)
* ``writer`` / ``ensemble_change`` -- appends, ensemble changes, close
* ``reader`` / ``entry_reads`` / ``lac_reads`` -- range reads, speculative reads, LAC and long polls
* ``recovery_op`` -- fencing and recovery
* ``rereplicate`` / ``autorecovery`` -- rebuilding the copies of lost bookies, by hand or in a loop
* ``metadata_ops`` -- the metadata compare-and-set loops
* ``transport`` / ``bookie_pool`` -- the bookie seam (gRPC) the above use; ``config`` -- ClientConfig
"""
from __future__ import annotations

# Names are loaded on first use (PEP 562): ``import pyspark_ledger.client.config`` (a Spark planner
# process, the metadata-only paths) must not import gRPC, protobuf and asyncio through this package.
_LAZY = {
    "AddResult": "pyspark_ledger.client.add_stream",
    "AddStream": "pyspark_ledger.client.add_stream",
    "AutoRecovery": "pyspark_ledger.client.autorecovery",
    "BookieClient": "pyspark_ledger.client.bookie_rpc",
    "BookieInfo": "pyspark_ledger.client.bookie_rpc",
    "LacResult": "pyspark_ledger.client.bookie_rpc",
    "ReadResult": "pyspark_ledger.client.bookie_rpc",
    "parse_address": "pyspark_ledger.client.bookie_rpc",
    "ClientConfig": "pyspark_ledger.client.config",
    "LedgerEntry": "pyspark_ledger.client.entry_reads",
    "LedgerClient": "pyspark_ledger.client.ledger_client",
    "LedgerReader": "pyspark_ledger.client.reader",
    "RereplicationReport": "pyspark_ledger.client.rereplicate",
    "BookieStatus": "pyspark_ledger.client.rpc_errors",
    "translate_rpc_error": "pyspark_ledger.client.rpc_errors",
    "BookieTransport": "pyspark_ledger.client.transport",
    "GrpcTransport": "pyspark_ledger.client.transport",
    "LedgerWriter": "pyspark_ledger.client.writer",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyspark_ledger.client' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
