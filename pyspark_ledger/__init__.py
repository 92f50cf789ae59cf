"""pyspark-ledger: a replicated, durable log store in the style of Apache BookKeeper.

Importing this package never imports pyspark; the Spark data source lives in
``pyspark_ledger.spark`` and is loaded only when Spark asks for it.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pyspark_ledger import errors  # noqa: E402,F401
