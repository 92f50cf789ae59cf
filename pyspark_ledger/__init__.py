"""pyspark-ledger: a replicated, durable log store in the style of Apache BookKeeper.

``from pyspark_ledger import LedgerClient`` is the public entry point (see
``pyspark_ledger.client.ledger_client``); ``ClientConfig`` configures it.
Importing this package never imports pyspark (the Spark data source lives in
``pyspark_ledger.spark``) nor gRPC: the client is loaded on first use.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pyspark_ledger import errors  # noqa: E402,F401

__all__ = ["ClientConfig", "LedgerClient", "errors"]


def __getattr__(name: str):
    if name in ("LedgerClient", "ClientConfig"):
        from pyspark_ledger.client import config, ledger_client
        return ledger_client.LedgerClient if name == "LedgerClient" else config.ClientConfig
    raise AttributeError(f"module 'pyspark_ledger' has no attribute {name!r}")
