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

from pyspark_ledger.client.add_stream import AddResult, AddStream
from pyspark_ledger.client.autorecovery import AutoRecovery
from pyspark_ledger.client.bookie_rpc import BookieClient, BookieInfo, LacResult, ReadResult, parse_address
from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.entry_reads import LedgerEntry
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.client.reader import LedgerReader
from pyspark_ledger.client.rereplicate import RereplicationReport
from pyspark_ledger.client.rpc_errors import BookieStatus, translate_rpc_error
from pyspark_ledger.client.transport import BookieTransport, GrpcTransport
from pyspark_ledger.client.writer import LedgerWriter

__all__ = ["AddResult", "AddStream", "AutoRecovery", "BookieClient", "BookieInfo", "BookieStatus", "BookieTransport",
           "ClientConfig", "GrpcTransport", "LacResult", "LedgerClient", "LedgerEntry", "LedgerReader",
           "LedgerWriter", "ReadResult", "RereplicationReport", "parse_address", "translate_rpc_error"]
