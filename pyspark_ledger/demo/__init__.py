"""``ledger demo``: the first thing a new user runs — a Spark streaming job over a local cluster.

It starts a sandbox (embedded SQLite metadata, 4 bookies), streams generated
events into a ``ledger`` stream with Spark Structured Streaming, kills one
bookie with SIGKILL while a ledger is being written (so the writer changes its
ensemble), reads the stream back with ``readStream`` (availableNow), checks
that every committed event came back exactly once with its exact content, and
prints a summary. The modules, one job each:

- ``events``: the event rows as Arrow batches, a pure function of the event id,
  and the check that a row read back is the row that was generated;
- ``event_source``: the Spark streaming source ``ledger-demo-events`` over them;
- ``verify``: the pure verdict — missing, duplicate, unexpected and altered rows;
- ``stream_layout``: what the stream holds in the metadata — ledgers, fragments, ensemble changes;
- ``bookie_killer``: pauses a bookie, then kills it once a ledger begun meanwhile proves a writer has adds
  it has not acknowledged (so the ensemble change is certain);
- ``spark_runs``: the Spark session (its log in a file), the write and the read-back queries;
- ``write_phase``: the timed streaming write with its progress lines and the kill;
- ``job``: the run from start to summary, with clean shutdown on every path;
- ``interrupts``: Ctrl-C / SIGTERM acted on at safe points (never inside a py4j call);
- ``summary``: the outcome of a run (``DemoSummary``), its JSON form;
- ``report``: the live progress lines and the summary table / JSON.

Importing this package imports neither pyspark nor pyarrow.
"""
