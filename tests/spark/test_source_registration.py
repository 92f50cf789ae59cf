"""``format("ledger")`` works with no ``spark.dataSource.register`` call, from any working directory.

Spark's lookup of Python data sources lists top-level modules with
``pkgutil.iter_modules()`` and registers the ``DefaultSource`` of each one
named ``pyspark_*``. The installed package (not the repository checkout in the
working directory) must be visible to that listing, so the end-to-end check
runs a fresh Spark application in a subprocess whose working directory and
``PYTHONPATH`` know nothing of the repository.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

import pyspark_ledger  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from pyspark_ledger.testing.spark import spark_unavailable_reason  # noqa: E402
from tests.spark.read_helpers import PASSWORD, SCHEMA, append_rows, start_sandbox  # noqa: E402

pytestmark = pytest.mark.spark
APPLICATION_TIMEOUT_S = 300

APPLICATION = textwrap.dedent("""
    import json, pkgutil, sys
    listed = sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_"))
    if "pyspark_ledger" not in listed:
        print(json.dumps({"listed": listed}))
        sys.exit(3)
    from pyspark_ledger.testing.spark import local_spark_session, stop_spark_session
    spark = local_spark_session("registration-check")
    try:
        frame = (spark.read.format("ledger").option("metadataServiceUri", sys.argv[1])
                 .option("stream", sys.argv[2]).option("password", sys.argv[3]).load())
        print(json.dumps({"listed": listed, "columns": frame.columns,
                          "rows": [list(row) for row in frame.orderBy("p", "seq").collect()]}))
    finally:
        stop_spark_session(spark)
""")


def test_the_package_exposes_default_source_lazily():
    assert pyspark_ledger.DefaultSource.name() == "ledger"
    assert "DefaultSource" not in pyspark_ledger.__all__  # "import *" must not pull in pyspark
    from pyspark.sql.datasource import DataSource
    assert issubclass(pyspark_ledger.DefaultSource, DataSource)


def test_format_ledger_needs_no_registration_from_another_directory(tmp_path):
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(reason)
    sandbox = start_sandbox()
    try:
        streams = executor.stream_client(sandbox.metadata_uri, PASSWORD)
        streams.create_stream("registered", 1, SCHEMA)
        append_rows(streams, "registered", 0, 0, 2, 3)
        script = tmp_path / "application.py"
        script.write_text(APPLICATION)
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        result = subprocess.run([sys.executable, str(script), sandbox.metadata_uri, "registered", PASSWORD],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=APPLICATION_TIMEOUT_S)
    finally:
        executor.close_all(sandbox.metadata_uri)
        sandbox.stop()
    assert result.returncode != 3, (
        f"pkgutil.iter_modules() does not list pyspark_ledger ({result.stdout.strip()}), so Spark cannot find "
        "format('ledger'): install with `pip install -e .` from a checkout whose setup.cfg sets package_dir")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["columns"] == ["p", "seq", "text"]
    assert report["rows"] == [[0, seq, f"p0-row{seq}"] for seq in range(6)]
