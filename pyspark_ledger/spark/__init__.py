"""The Spark ``ledger`` data source: streams of ledgers read and written as Arrow batches.

``spark.read.format("ledger")``, ``readStream``, ``df.write`` and ``writeStream``
need no registration: ``pyspark_ledger.DefaultSource`` (``source``) is found by
Spark's lookup of top-level ``pyspark_*`` modules. Importing ``pyspark_ledger``
or this package never imports pyspark (that lookup imports every such module,
and users without Spark must be able to use the client). The modules:

- ``source``: ``DefaultSource``, the façade: schema, readers, writers;
- ``batch_reader``: batch reads planned as entry ranges, decoded to Arrow on executors;
- ``stream_reader``: streaming reads with one offset per partition (every Spark 4);
- ``stream_admission``: the stream reader with admission control and AvailableNow (Spark 4.2+);
- ``compat``: what the running Spark offers; fallbacks and clear errors on Spark 4.0/4.1;
- ``sink`` and ``sink_*``: batch and streaming writes, one ledger per task, exactly-once commits;
- ``executor``: one StreamClient / LedgerClient per Python process, shared by every task;
- ``options``: every option of ``format("ledger")``, parsed and validated per mode;
- ``offsets``: streaming offsets (a log position per partition) and startingOffsets/endingOffsets;
- ``planning``: offsets resolved against partition logs, data loss, admission control, read ranges;
- ``schema``: Spark schemas <-> the Arrow schema a stream stores, batches conformed to it;
- ``arrow_codec``: one Arrow record batch per entry, encoded and decoded without per-row Python;
- ``session``: ``spark_session`` / ``stop_spark_session``, the public helper for a local, quiet
  SparkSession (re-exported here).

The pure modules (``options``, ``offsets``, ``planning``) import neither pyspark
nor pyarrow; ``schema`` imports pyspark only inside the functions that need it;
the Spark-facing modules (``source``, readers, sinks) import pyspark.
"""
from pyspark_ledger.spark.session import spark_session, spark_unavailable_reason, stop_spark_session

__all__ = ["spark_session", "spark_unavailable_reason", "stop_spark_session"]
