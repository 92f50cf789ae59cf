"""Cells of ``02_streaming.ipynb``: readStream + writeStream, offsets, admission control, rows per micro-batch.

Built by ``notebooks/build_notebooks.py``; edit here, then rebuild.
"""

CELLS = [
("markdown", """
# Streaming: a pipeline from one stream into another

A stream in pyspark-ledger is a replicated log, so it is a natural source *and* sink for Spark Structured
Streaming. In this notebook a streaming query reads click events from the stream `clicks`, keeps the
checkout clicks, and writes them into the stream `checkouts`. Along the way:

* **offsets** — how a query remembers where it is in a stream;
* **admission control** — capping how much one micro-batch reads (`maxEntriesPerTrigger`);
* **exactly once** — a restarted query continues where it stopped, and writes nothing twice.
"""),
("code", """
import tempfile

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from pyspark.sql import functions as F

from pyspark_ledger.sandbox import Sandbox
from pyspark_ledger.spark import spark_session, stop_spark_session

sb = Sandbox(bookies=3).start()
spark = spark_session("streaming")
LEDGER = {"metadataServiceUri": sb.metadata_uri}
checkpoints = tempfile.TemporaryDirectory(prefix="ledger-checkpoints-")
pd.set_option("display.max_colwidth", 100)  # show offsets whole
print("metadataServiceUri =", sb.metadata_uri)
"""),
("markdown", """
## Some clicks

First, 6,000 click events written in batch into `clicks`: two partitions, 500 rows per entry, so each
partition's log gets 6 entries.
"""),
("code", """
PAGES = ["home", "search", "product", "cart", "checkout"]


def clicks_frame(first_id, count):
    \"\"\"count click events with ids first_id..; every fifth one is a checkout.\"\"\"
    return (spark.range(first_id, first_id + count)
            .select(F.col("id").alias("click_id"),
                    (F.col("id") % 1000).alias("user_id"),
                    F.element_at(F.array(*map(F.lit, PAGES)), (F.col("id") % 5 + 1).cast("int")).alias("page"))
            .repartition(2))


clicks_frame(0, 6_000).write.format("ledger").options(**LEDGER) \\
    .option("rowsPerEntry", 500).mode("append").save("clicks")
spark.read.format("ledger").options(**LEDGER).load("clicks").groupBy("page").count().toPandas()
"""),
("markdown", """
## The streaming query

`readStream.format("ledger")` reads a stream as it grows. Its **offset** is, per partition, the position
of the next entry to read: `{"0": {"ledger": 0, "entry": 8}, ...}` — `ledger` counts the ledgers of that
partition's log, `entry` is the entry within it. Spark writes the offsets of every micro-batch to the
checkpoint before running it, which is how a restarted query knows where to continue.

`maxEntriesPerTrigger` is **admission control**: a micro-batch reads at most that many entries (over
all partitions), so a query that falls behind catches up in bounded steps instead of one huge batch.
Here: at most 4 entries, that is at most 4 × 500 = 2,000 rows. (The cap counts entries, not rows: an
entry holds up to the writer's `rowsPerEntry` rows.)

`trigger(availableNow=True)` processes what is in the stream when the query starts — still in
micro-batches of at most 4 entries — then stops. (Leave it out and the query runs until stopped,
picking up new entries as they are confirmed.)

The sink side, `writeStream.format("ledger")`, commits each micro-batch into `checkouts` exactly once:
the commit is keyed by the query's checkpoint and the micro-batch id, so a batch replayed after a crash
changes nothing.
"""),
("code", """
def run_pipeline():
    \"\"\"Run the clicks -> checkouts query until it has read what is available now; its progress reports.\"\"\"
    checkouts = (spark.readStream.format("ledger").options(**LEDGER)
                 .option("maxEntriesPerTrigger", 4)
                 .load("clicks")
                 .where(F.col("page") == "checkout"))
    query = (checkouts.writeStream.format("ledger").options(**LEDGER)
             .option("checkpointLocation", f"{checkpoints.name}/clicks-to-checkouts")
             .trigger(availableNow=True)
             .start("checkouts"))
    query.awaitTermination()
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def batches(progress, run):
    \"\"\"One row per micro-batch: its id, rows read, and the offsets it started and ended at.\"\"\"
    rows = []
    for p in progress:
        source = p["sources"][0]
        start = source["startOffset"]
        rows.append({"run": run, "batch": p["batchId"], "rows read": p["numInputRows"],
                     "start offset": "(initial: earliest)" if start in (None, "null") else start,
                     "end offset": source["endOffset"]})
    return pd.DataFrame(rows)


first_run = batches(run_pipeline(), run=1)
first_run
"""),
("markdown", """
Three micro-batches of at most 2,000 rows read the 6,000 clicks. An offset is not just a bookmark: a
**batch** read accepts the same JSON as its `startingOffsets` / `endingOffsets` options, so the rows of
any micro-batch can be read again.
"""),
("code", """
second = first_run.iloc[1]
replay = (spark.read.format("ledger").options(**LEDGER)
          .option("startingOffsets", second["start offset"])
          .option("endingOffsets", second["end offset"])
          .load("clicks"))
replayed = replay.count()
assert replayed == second["rows read"]
print(f"micro-batch {second['batch']} read {second['rows read']} rows; its offsets read again: {replayed} rows")
"""),
("markdown", """
## More clicks arrive; the query resumes

2,500 more clicks are appended (3 entries per partition, the last one holding 250 rows). Running the query again with the same checkpoint reads only those: the
checkpoint's last offsets say where the first run stopped.
"""),
("code", """
clicks_frame(6_000, 2_500).write.format("ledger").options(**LEDGER) \\
    .option("rowsPerEntry", 500).mode("append").save("clicks")

second_run = batches(run_pipeline(), run=2)
second_run
"""),
("markdown", """
### Rows per micro-batch

No micro-batch reads more than the admission-control cap; the last one of each run takes what is left.
The second run starts from the offsets the first one ended at: `{"ledger": 0, "entry": 6}` is just past
the last entry of each partition's first ledger, and the appended clicks are in a second ledger of each
log (`"ledger": 1`).
"""),
("code", """
runs = pd.concat([first_run, second_run], ignore_index=True)
fig, ax = plt.subplots(figsize=(10, 3.5))
colors = runs["run"].map({1: "tab:blue", 2: "tab:orange"})
ax.bar(runs["batch"].astype(str), runs["rows read"], color=colors)
ax.axhline(4 * 500, color="red", linestyle="--")
ax.set(xlabel="micro-batch id", ylabel="rows read", title="clicks read per micro-batch")
ax.set_ylim(0, 2_600)
ax.legend(handles=[Patch(color="tab:blue", label="first run: the 6,000 clicks written first"),
                   Patch(color="tab:orange", label="second run, after the restart: the 2,500 new clicks"),
                   Line2D([], [], color="red", linestyle="--", label="cap: maxEntriesPerTrigger=4 × 500 rows per entry")],
          loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
fig.tight_layout()
plt.show()
"""),
("markdown", """
## Exactly once

`checkouts` holds every checkout click once: the filter applied to all 8,500 clicks gives the same rows.
"""),
("code", """
clicks = spark.read.format("ledger").options(**LEDGER).load("clicks")
checkouts = spark.read.format("ledger").options(**LEDGER).load("checkouts")
expected = clicks.where(F.col("page") == "checkout")
n_read, n_checkouts = runs["rows read"].sum(), checkouts.count()
assert n_read == 8_500                      # every click written was read once, over both runs
assert n_checkouts == expected.count() and checkouts.exceptAll(expected).count() == 0
print(f"{n_read} clicks read, {n_checkouts} checkouts written: no duplicates, none missing")
"""),
("markdown", """
## Clean up

Stop Spark (and its JVM), then the sandbox; the checkpoints were in a temporary directory.
"""),
("code", """
stop_spark_session(spark)
sb.stop()
checkpoints.cleanup()
print(sb)
"""),
]
