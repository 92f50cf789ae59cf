"""Cells of ``01_quickstart.ipynb``: a sandbox, a DataFrame written and read back, the ledgers behind it.

Built by ``notebooks/build_notebooks.py``; edit here, then rebuild.
"""

CELLS = [
("markdown", """
# Quickstart: a DataFrame into a replicated log, and back

pyspark-ledger stores data as **streams**: append-only, replicated logs that Spark can write and read like
any other data source (`format("ledger")`), in batch or streaming queries.

In this notebook we

1. start a small cluster on this machine (a *sandbox*),
2. write a DataFrame into a stream and read it back,
3. look underneath: the **ledgers** that hold the data, and where their copies live.

No setup is needed beyond `pip install 'pyspark-ledger[spark]'` and Java 17.
"""),
("markdown", """
## Start a sandbox and Spark

The sandbox runs, as separate processes on 127.0.0.1:

* a **metadata store** — here an SQLite file (on a real cluster: ZooKeeper). It knows which streams exist
  and where their data lives. Everything that connects to the cluster needs only its URI;
* three **bookies** — the storage servers. Each piece of data is stored on several of them, and is on disk
  (fsync'd) before a write is acknowledged.

`spark_session()` (from `pyspark_ledger.spark`) gives a local Spark session bound to 127.0.0.1, with
quiet logs; the `ledger` source needs no registration. `stop_spark_session(spark)` stops it, JVM included.
"""),
("code", """
import pandas as pd
from pyspark.sql import functions as F

from pyspark_ledger import LedgerClient
from pyspark_ledger.log import StreamClient
from pyspark_ledger.sandbox import Sandbox
from pyspark_ledger.spark import spark_session, stop_spark_session

sb = Sandbox(bookies=3).start()
spark = spark_session("quickstart")
LEDGER = {"metadataServiceUri": sb.metadata_uri}
print("metadataServiceUri =", sb.metadata_uri)
print("bookies:", sb.bookie_ids)
"""),
("markdown", """
## Write a DataFrame

Some orders: 10,000 rows, in two Spark partitions. `save("orders")` writes them into the stream `orders`,
creating it on first use with as many partitions as the DataFrame has.

Rows travel in Arrow format, `rowsPerEntry` rows per **entry** (the unit of storage and replication).
Each Spark task writes its rows into a ledger of its own; once every task has succeeded, one atomic
update of the metadata adds all those ledgers to the stream. A failed job adds nothing.
"""),
("code", """
orders = (spark.range(10_000)
          .select(F.col("id").alias("order_id"),
                  F.concat(F.lit("customer-"), (F.col("id") % 40).cast("string")).alias("customer"),
                  (F.col("id") * 7919 % 10_000 / 100).alias("amount"))
          .repartition(2))

orders.write.format("ledger").options(**LEDGER).option("rowsPerEntry", 1000).mode("append").save("orders")
print("written into the stream 'orders'")
"""),
("markdown", """
## Read it back

A read takes the stream's schema from the metadata store, so no schema has to be given.
"""),
("code", """
back = spark.read.format("ledger").options(**LEDGER).load("orders")
back.printSchema()
assert back.count() == 10_000 and back.exceptAll(orders).count() == 0   # the very same rows
back.orderBy("order_id").limit(5).toPandas()
"""),
("markdown", """
It is an ordinary DataFrame: filter it, join it, aggregate it.
"""),
("code", """
(back.groupBy("customer")
     .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
     .orderBy(F.desc("total"))
     .limit(5)
     .toPandas())
"""),
("markdown", """
## Underneath: partitions, ledgers, entries

A stream has **partitions**; each partition is a log made of **ledgers**, one after the other; a ledger is a
sequence of **entries**. With `includeMetadata` the read also returns where each row came from.
"""),
("code", """
located = spark.read.format("ledger").options(**LEDGER).option("includeMetadata", "true").load("orders")
(located.groupBy("_partition", "_ledger_id")
        .agg(F.count("*").alias("rows"), F.countDistinct("_entry_id").alias("entries"))
        .orderBy("_partition")
        .toPandas())
"""),
("markdown", """
The stream's description and every ledger's metadata, read with the Python clients (no Spark needed):

* **state** — `CLOSED`: the ledger is complete and will never change; its last entry and length are recorded.
* **E / Qw / Qa** — the ledger is spread over an *ensemble* of E bookies; each entry is written to Qw of them
  and acknowledged once Qa have it on disk. The defaults 3 / 3 / 2 keep three copies of every entry and
  acknowledge it once two are on disk, so losing any one bookie loses no acknowledged entry.
* **ensemble** — the bookies holding its copies (a ledger written while a bookie failed would list one
  ensemble per *fragment*; see notebook 3).
"""),
("code", """
streams = StreamClient(sb.metadata_uri)
ledgers = LedgerClient(sb.metadata_uri)
name = {bookie_id: f"bookie {i}" for i, bookie_id in enumerate(sb.bookie_ids)}

info = streams.open_stream("orders")
print(f"stream {info.name!r}: {info.partitions} partitions, schema: "
      + ", ".join(f"{field.name} {field.type}" for field in info.arrow_schema()))


def ledger_table(stream):
    \"\"\"One row per ledger of the stream, from the ledgers' metadata.\"\"\"
    rows = []
    for partition, log in sorted(streams.partition_logs(stream).items()):
        for span in log.spans:
            md = ledgers.ledger_metadata(span.ledger_id)
            rows.append({"partition": partition, "ledger": md.ledger_id, "state": md.state,
                         "entries": md.last_entry_id + 1, "bytes": md.length,
                         "E / Qw / Qa": f"{md.ensemble_size} / {md.write_quorum} / {md.ack_quorum}",
                         "ensemble": " | ".join(", ".join(name[b] for b in f.bookies) for f in md.fragments)})
    return pd.DataFrame(rows)


ledger_table("orders")
"""),
("markdown", """
## Append more

A second write appends: each task adds one more ledger to its partition's log. Readers see the stream
grow by exactly the rows written — never a partial write.
"""),
("code", """
more = orders.select((F.col("order_id") + 10_000).alias("order_id"), "customer", "amount")
more.write.format("ledger").options(**LEDGER).option("rowsPerEntry", 1000).mode("append").save("orders")

total = spark.read.format("ledger").options(**LEDGER).load("orders").count()
assert total == 20_000
print("rows in the stream now:", total)
ledger_table("orders")
"""),
("markdown", """
## Clean up

Close the clients, stop Spark (and its JVM), then the sandbox (every bookie, and its temporary directory).
"""),
("code", """
streams.close()
ledgers.close()
stop_spark_session(spark)
sb.stop()
print(sb)
"""),
]
