"""The replication client and the seam to one bookie (``bookie_rpc``)."""
from __future__ import annotations

from pyspark_ledger.client.add_stream import AddResult, AddStream
from pyspark_ledger.client.bookie_rpc import BookieClient, BookieInfo, LacResult, ReadResult, parse_address
from pyspark_ledger.client.rpc_errors import BookieStatus, translate_rpc_error

__all__ = ["AddResult", "AddStream", "BookieClient", "BookieInfo", "BookieStatus", "LacResult", "ReadResult",
           "parse_address", "translate_rpc_error"]
