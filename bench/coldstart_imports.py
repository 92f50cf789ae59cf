"""What each entry point of ``format("ledger")`` imports, and how long it takes, in a fresh Python process.

Usage: ``python bench/coldstart_imports.py [--runs 5] [--tree DIR ...] [--out FILE]``.

Spark runs a Python data source's methods in processes it starts afresh after a minute idle
(docs/measurements.md, "The first Spark job after a minute idle"): the lookup, ``schema()``, the
planner (``reader()`` and ``partitions()``, ``writer()``), the executors (``read``, ``write``) and the
commit. Each gets what it needs pickled, as Spark does (cloudpickle). This script plays each of
those processes against a real sandbox (3 bookie processes, SQLite metadata) holding a stream
written through the connector's own code: every probe is a new interpreter that imports
``pyspark_ledger.spark.source`` (phase ``import``) and then runs one entry point (phase ``call``),
recording the wall seconds and the modules loaded by each phase, and which heavy packages (gRPC,
protobuf, asyncio, kazoo, cryptography, pyarrow) were loaded by the end. No Spark JVM is started.
Reports the median of ``--runs`` fresh processes per entry point (wall and CPU seconds: the CPU of a
probe swings less than its wall time on a loaded machine), every run beside it, and the load
averages before and after. ``--tree`` (repeatable) compares checkouts in the same run: every round
runs each entry point once per tree, in turn, on the same sandbox and stream.
"""
from __future__ import annotations

import base64
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402

HEAVY = ("grpc", "google.protobuf", "asyncio", "kazoo", "cryptography", "pyarrow", "sqlite3",
         "pyspark_ledger.client", "pyspark_ledger.client.ledger_client")
PASSWORD = "coldstart"

# One probe process: the setup lines prepare the arguments (pickles, as Spark hands them over) before
# anything of this package is imported; then the import and the call are timed separately.
PROBE = r"""
import sys, time, json, base64
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource
before = set(sys.modules)
c0, t0 = time.process_time(), time.perf_counter()
import pyspark_ledger.spark.source
c1, t1 = time.process_time(), time.perf_counter()
after_import = set(sys.modules)
blobs = [base64.b64decode(blob) for blob in sys.argv[2:]]
STEP
c2, t2 = time.process_time(), time.perf_counter()
after_call = set(sys.modules)
heavy = {name: name in sys.modules for name in HEAVY}
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "import_cpu_s": c1 - c0, "call_cpu_s": c2 - c1,
                  "source_file": pyspark_ledger.spark.source.__file__,
                  "import_modules": len(after_import - before),
                  "call_modules": len(after_call - after_import), "loaded": heavy}))
import os
os._exit(0)
"""

STEPS = {
    # schema(): the DataSource instance pickled by the "create" process.
    "schema": "cloudpickle.loads(blobs[0]).schema()",
    # the planner: unpickle the data source, make a reader, plan it (partitions()).
    "reader_partitions": "r = cloudpickle.loads(blobs[0]).reader(cloudpickle.loads(blobs[1])); r.partitions()",
    # an executor: unpickle the reader and one input partition, read it.
    "read": "r = cloudpickle.loads(blobs[2]); sum(b.num_rows for b in r.read(cloudpickle.loads(blobs[3])))",
    # the streaming planner: a stream reader's offsets and partitions.
    "stream_reader_offsets": ("r = cloudpickle.loads(blobs[0]).streamReader(cloudpickle.loads(blobs[1]));"
                              " s = r.initialOffset(); e = r.latestOffset(s, r.getDefaultReadLimit())"
                              " if hasattr(r, 'getDefaultReadLimit') else r.latestOffset(); r.partitions(s, e)"),
    # the write planner: writer(schema, overwrite=False).
    "writer": "cloudpickle.loads(blobs[4]).writer(cloudpickle.loads(blobs[1]), False)",
    "stream_writer": "cloudpickle.loads(blobs[5]).streamWriter(cloudpickle.loads(blobs[1]), False)",
    # the commit process: unpickle the writer and a finished task's message, commit.
    "commit": "w = cloudpickle.loads(blobs[6]); w.commit([cloudpickle.loads(blobs[7])])",
}


def blobs_for(sandbox_uri: str, stream: str) -> tuple[list[str], callable]:
    """The pickles each probe gets (as strings), made with the connector's code in this process."""
    from pyspark import cloudpickle

    from pyspark_ledger.spark.sink_task import write_task
    from pyspark_ledger.spark.source import DefaultSource
    from tests.spark.read_helpers import rows_batch

    read_opts = {"metadataServiceUri": sandbox_uri, "stream": stream, "password": PASSWORD}
    source = DefaultSource(read_opts)
    schema = source.schema()
    reader = source.reader(schema)
    partitions = reader.partitions()
    write_source = DefaultSource({**read_opts, "stream": stream + "-w"})
    stream_write_source = DefaultSource({**read_opts, "stream": stream + "-sw",
                                         "checkpointLocation": tempfile.mkdtemp(prefix="coldstart-ckpt-")})

    def commit_pair() -> list[str]:
        writer = write_source.writer(schema, False)
        message = write_task(writer.plan, iter([rows_batch(0, 0, 100)]), 0)
        return [_b64(cloudpickle.dumps(writer)), _b64(cloudpickle.dumps(message))]

    fixed = [_b64(cloudpickle.dumps(obj)) for obj in (source, schema, reader, partitions[0], write_source,
                                                         stream_write_source)]
    return fixed, commit_pair


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def probe(step: str, blobs: list[str], env: dict) -> dict:
    code = PROBE.replace("STEP", STEPS[step]).replace("HEAVY", repr(HEAVY))
    with tempfile.TemporaryDirectory(prefix="coldstart-probe-") as directory:  # not /tmp on sys.path
        script = Path(directory) / "probe.py"
        script.write_text(code)
        result = subprocess.run([sys.executable, str(script), "-", *blobs], capture_output=True, text=True,
                                timeout=300, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"probe {step} failed:\n{result.stderr[-3000:]}")
    import json
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--runs", int, 5, help="fresh processes per entry point and tree")
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--tree", action="append", type=Path,
                        help="a checkout whose pyspark_ledger the probes import (repeatable: the trees take turns "
                             "in every round); default: this one")
    args = parser.parse_args(argv)
    from tests.spark.read_helpers import SCHEMA, append_rows, start_sandbox

    from pyspark_ledger.spark import executor

    load_before = Path("/proc/loadavg").read_text().split()[:3]
    sandbox = start_sandbox()
    try:
        streams = executor.stream_client(sandbox.metadata_uri, PASSWORD)
        stream = f"coldstart-{os.getpid()}"
        streams.create_stream(stream, 2, SCHEMA)
        for partition in (0, 1):
            append_rows(streams, stream, partition, 0, 4, 50)
        fixed, commit_pair = blobs_for(sandbox.metadata_uri, stream)
        trees = [tree.resolve() for tree in (args.tree or [ROOT])]
        steps = [step for step in args.steps.split(",") if step]
        runs: dict[tuple[str, str], list[dict]] = {(str(tree), step): [] for tree in trees for step in steps}
        for _ in range(args.runs):
            for step in steps:  # interleaved: every entry point once per round, each tree in turn
                for tree in trees:
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
                    blobs = fixed + (commit_pair() if step == "commit" else [])
                    found = probe(step, blobs, env)
                    if not found["source_file"].startswith(str(tree)):
                        raise RuntimeError(f"the probe imported {found['source_file']}, not the tree {tree}")
                    runs[(str(tree), step)].append(found)
    finally:
        executor.close_all()
        sandbox.stop()
    result = {"benchmark": "coldstart_imports", "trees": [str(tree) for tree in trees], "runs_per_step": args.runs,
              "loadavg_before": load_before, "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
              "steps": {}}
    for (tree, step), items in runs.items():
        result["steps"].setdefault(tree, {})[step] = {
            "import_s_median": round(statistics.median(r["import_s"] for r in items), 3),
            "call_s_median": round(statistics.median(r["call_s"] for r in items), 3),
            "total_s_median": round(statistics.median(r["import_s"] + r["call_s"] for r in items), 3),
            "import_cpu_s_median": round(statistics.median(r["import_cpu_s"] for r in items), 3),
            "call_cpu_s_median": round(statistics.median(r["call_cpu_s"] for r in items), 3),
            "import_modules": items[0]["import_modules"],
            "call_modules": items[0]["call_modules"],
            "loaded": [name for name, seen in items[0]["loaded"].items() if seen],
            "call_s_runs": [round(r["call_s"], 3) for r in items],
            "call_cpu_s_runs": [round(r["call_cpu_s"], 3) for r in items],
        }
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
