"""The replication client and the seam to one bookie (``bookie_rpc``)."""
