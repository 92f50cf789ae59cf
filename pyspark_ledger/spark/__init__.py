"""The Spark ``ledger`` data source: streams of ledgers read and written as Arrow batches.

Importing ``pyspark_ledger`` or this package never imports pyspark (Spark's
data source lookup imports every ``pyspark_*`` module at session start, and
users without Spark must be able to use the client). The modules:

- ``options``: every option of ``format("ledger")``, parsed and validated per mode;
- ``offsets``: streaming offsets (a log position per partition) and startingOffsets/endingOffsets;
- ``planning``: offsets resolved against partition logs, data loss, admission control, read ranges;
- ``schema``: Spark schemas <-> the Arrow schema a stream stores, batches conformed to it;
- ``arrow_codec``: one Arrow record batch per entry, encoded and decoded without per-row Python.

Only ``schema`` imports pyspark, and only inside the functions that need it.
"""
