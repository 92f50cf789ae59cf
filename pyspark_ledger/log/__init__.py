"""Logs of ledgers: streams, their partitions, and positions in a log.

Pure building blocks live here first (``positions``); the log layer proper
(opening a log as its single writer, rolling ledgers, reading across ledgers)
builds on the replication client.
"""
from __future__ import annotations

from pyspark_ledger.log.positions import EARLIEST, LATEST, LogPosition, parse_position

__all__ = ["EARLIEST", "LATEST", "LogPosition", "parse_position"]
