"""The public session helper ``pyspark_ledger.spark.spark_session``: a user's session is quiet and stops whole.

A user's process is run as a user would run it (a fresh interpreter, working
directory outside the checkout): whatever pandas is installed, nothing of
Spark or PySpark reaches its stderr (no start-up banner, no log4j lines, no
"does not yet fully support pandas" FutureWarning, from the driver or from a
Python worker), the JVM's log goes to the default log file, and
``stop_spark_session`` ends the JVM.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.spark import spark_session, spark_unavailable_reason

pytestmark = pytest.mark.spark
REPO_ROOT = Path(__file__).resolve().parents[2]
APPLICATION_TIMEOUT_S = 600
NO_SPARK = spark_unavailable_reason()

APPLICATION = textwrap.dedent("""
    import json, os
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf
    from pyspark_ledger.spark import spark_session, stop_spark_session
    from pyspark_ledger.spark.session import default_log_file

    spark = spark_session("quiet-check")
    frame = spark.range(100).toPandas()                 # the driver checks pandas

    @pandas_udf("long")
    def plus_one(times):                                # a Python worker checks pandas for timestamps
        return times.dt.second.astype("int64") + 1

    seconds = spark.range(100).select(F.timestamp_seconds(F.col("id") % 60).alias("t"))
    total = seconds.select(plus_one("t").alias("x")).agg(F.sum("x")).collect()[0][0]
    jvm = spark.sparkContext._gateway.proc.pid
    stop_spark_session(spark)
    print(json.dumps({"rows": len(frame), "total": total, "jvm": jvm, "log": str(default_log_file())}))
""")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(bool(NO_SPARK), reason=f"needs Spark: {NO_SPARK}")
@pytest.mark.timeout(APPLICATION_TIMEOUT_S)
def test_a_users_session_prints_nothing_to_stderr_and_stops_its_jvm(tmp_path):
    import pandas

    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("PYTHONWARNINGS", None)
    result = subprocess.run([sys.executable, "-c", APPLICATION], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=APPLICATION_TIMEOUT_S - 30)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == "", f"a user's session printed to stderr (pandas {pandas.__version__}):\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["rows"] == 100 and report["total"] == sum(i % 60 + 1 for i in range(100))
    assert not alive(report["jvm"]), "stop_spark_session left the JVM running"
    log = Path(report["log"])
    assert log.parent == tmp_path and log.exists(), "the JVM's log should be in the temp dir"
    assert "does not yet fully support pandas" not in log.read_text(errors="replace"), "a Python worker warned"


@pytest.mark.skipif(bool(NO_SPARK), reason=f"needs Spark: {NO_SPARK}")
@pytest.mark.parametrize("arguments, named", [({"cores": 0}, "cores"), ({"cores": True}, "cores"),
                                              ({"log_level": "LOUD"}, "log_level")])
def test_bad_arguments_are_refused_before_anything_starts(arguments, named):
    with pytest.raises(InvalidConfigurationError, match=named):
        spark_session("bad", **arguments)
