"""pyspark-ledger: a replicated, durable log store in the style of Apache BookKeeper.

``from pyspark_ledger import LedgerClient`` is the public entry point (see
``pyspark_ledger.client.ledger_client``); ``ClientConfig`` configures it.
Importing this package never imports pyspark (the Spark data source lives in
``pyspark_ledger.spark``) nor gRPC: the client is loaded on first use.

``DefaultSource`` is the Spark data source ``format("ledger")``
(``pyspark_ledger.spark.source``), loaded on first access: Spark's lookup of
Python data sources imports every top-level ``pyspark_*`` module and registers
its ``DefaultSource``, so no ``spark.dataSource.register`` call is needed.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pyspark_ledger import errors  # noqa: E402,F401

__all__ = ["ClientConfig", "LedgerClient", "errors"]  # not DefaultSource: "import *" must not import pyspark


def __getattr__(name: str):
    if name in ("LedgerClient", "ClientConfig"):
        from pyspark_ledger.client import config, ledger_client
        return ledger_client.LedgerClient if name == "LedgerClient" else config.ClientConfig
    if name == "DefaultSource":
        from pyspark_ledger.spark.source import DefaultSource
        return DefaultSource
    raise AttributeError(f"module 'pyspark_ledger' has no attribute {name!r}")
