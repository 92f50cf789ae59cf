"""A sqlite:/// metadata store with a Spark master whose executors run on other hosts is refused at planning.

``driver_master`` reads the master the driver JVM was submitted with from the nearest ancestor process running
SparkSubmit; here a stand-in ancestor (a Python process whose command line names SparkSubmit and its
arguments) starts the process that asks. The options refuse such a read or write naming the option, say to use
ZooKeeper, and accept ``sqliteSharedFilesystem=true``; a local master, a ZooKeeper URI or an unknown master
pass. A real Spark driver submitted with a ``spark://`` master is refused before any task, in
``test_a_spark_write_with_a_cluster_master_and_sqlite_fails_at_planning`` (needs Spark).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.spark.driver_master import SUBMIT_CLASS, check_metadata_reachable, master_from_args
from pyspark_ledger.spark.options import parse_read_options, parse_write_options

URI = "sqlite:///tmp/ledger-driver-master/metadata.db"
ZK = "zk://10.0.0.11:2181/ledger"


@pytest.mark.parametrize("args,env,master", [
    (["--conf", "spark.master=spark://10.0.0.19:7077", "--conf", "spark.app.name=x", "pyspark-shell"], {},
     "spark://10.0.0.19:7077"),
    (["--master", "yarn", "--conf", "spark.master=local[2]", "app.py"], {}, "yarn"),
    (["--master=k8s://https://api:6443", "--verbose", "app.py", "--master", "local"], {}, "k8s://https://api:6443"),
    (["--verbose", "-c", "spark.master=local[2,4]", "pyspark-shell"], {}, "local[2,4]"),
    (["--name", "--master", "app.py"], {"MASTER": "spark://m:7077"}, "spark://m:7077"),
    (["app.py", "--master", "yarn"], {}, None),
    ([], {}, None),
])
def test_the_master_is_read_as_spark_submit_reads_it(args, env, master):
    assert master_from_args(args, env) == master


def test_the_properties_file_gives_the_master_when_the_command_line_does_not(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text("# defaults\nspark.masterish x\nspark.master   spark://d:7077\n")
    assert master_from_args(["pyspark-shell"], {"SPARK_CONF_DIR": str(tmp_path)}) == "spark://d:7077"
    other = tmp_path / "other.conf"
    other.write_text("spark.master=yarn\n")
    assert master_from_args(["--properties-file", str(other), "app.py"], {}) == "yarn"
    assert master_from_args(["--master", "local", "app.py"], {"SPARK_CONF_DIR": str(tmp_path)}) == "local"


def test_a_cluster_master_with_a_sqlite_store_is_refused_naming_the_option():
    with pytest.raises(InvalidConfigurationError) as caught:
        check_metadata_reachable(URI, False, "spark://10.0.0.19:7077")
    message = str(caught.value)
    assert message.startswith(f"option metadataServiceUri={URI!r} is a SQLite file on the driver's host, but "
                              "spark.master='spark://10.0.0.19:7077' runs executors on other hosts"), message
    assert "use ZooKeeper metadata (zk://" in message and "set option sqliteSharedFilesystem=true" in message
    for uri, shared, master in [(URI, True, "yarn"), (URI, False, "local[2]"), (URI, False, "local-cluster[2,1,1024]"),
                                (ZK, False, "yarn")]:
        check_metadata_reachable(uri, shared, master)


ASKER = textwrap.dedent("""
    import json, sys
    from pyspark_ledger.errors import InvalidConfigurationError
    from pyspark_ledger.spark.driver_master import driver_master
    from pyspark_ledger.spark.options import parse_read_options, parse_write_options
    results = {"master": driver_master()}
    for name, options in [("sqlite", {"metadataServiceUri": sys.argv[1], "stream": "s"}),
                          ("shared", {"metadataServiceUri": sys.argv[1], "stream": "s",
                                      "sqliteSharedFilesystem": "true"}),
                          ("zk", {"metadataServiceUri": sys.argv[2], "stream": "s"})]:
        for parse in (parse_read_options, parse_write_options):
            try:
                parse(options)
                results[f"{name}-{parse.__name__}"] = "ok"
            except InvalidConfigurationError as exc:
                results[f"{name}-{parse.__name__}"] = str(exc)
    print(json.dumps(results))
""")


def ask_under_submit(master_args: list[str]) -> dict:
    """Run ASKER as the child of a process whose command line is SparkSubmit's, as under a driver JVM."""
    parent = ("import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2], "
              "sys.argv[3]]).returncode)")
    command = [sys.executable, "-c", parent, ASKER, URI, ZK, SUBMIT_CLASS, *master_args, "pyspark-shell"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_under_a_driver_submitted_to_a_cluster_the_options_refuse_a_sqlite_store():
    results = ask_under_submit(["--conf", "spark.master=spark://10.0.0.19:7077"])
    assert results["master"] == "spark://10.0.0.19:7077"
    for parse in ("parse_read_options", "parse_write_options"):
        assert "runs executors on other hosts, which cannot open it" in results[f"sqlite-{parse}"]
        assert results[f"shared-{parse}"] == "ok" and results[f"zk-{parse}"] == "ok"


def test_under_a_local_driver_or_none_a_sqlite_store_is_accepted():
    results = ask_under_submit(["--conf", "spark.master=local[2]"])
    assert results["master"] == "local[2]" and results["sqlite-parse_write_options"] == "ok"
    parse_write_options({"metadataServiceUri": URI, "stream": "s"})   # pytest has no SparkSubmit above it


def test_the_shared_option_needs_a_sqlite_uri():
    with pytest.raises(InvalidConfigurationError, match="option sqliteSharedFilesystem applies only to a sqlite"):
        parse_read_options({"metadataServiceUri": ZK, "stream": "s", "sqliteSharedFilesystem": "false"})
    with pytest.raises(InvalidConfigurationError, match="sqliteSharedFilesystem='yes' is invalid"):
        parse_read_options({"metadataServiceUri": URI, "stream": "s", "sqliteSharedFilesystem": "yes"})


SPARK_SCRIPT = textwrap.dedent("""
    import sys
    from pyspark_ledger.spark.session import spark_session, stop_spark_session
    spark = spark_session("driver-master-test", conf={"spark.master": sys.argv[1]}, log_file=sys.argv[3])
    try:
        writer = spark.range(3).write.format("ledger").mode("append").option("metadataServiceUri", sys.argv[2])
        try:
            writer.save("events")
            print("WRITTEN")
        except Exception as exc:
            print("ERROR " + " ".join(str(exc).split())[:4000])
    finally:
        stop_spark_session(spark)
""")


@pytest.fixture
def standalone_master(tmp_path):
    """A real Spark standalone master on 127.0.0.1 without workers (planning needs no executor); stopped after."""
    import os
    import signal

    from pyspark_ledger.spark.session import spark_unavailable_reason
    from pyspark_ledger.testing.cluster.services import spark_home
    from pyspark_ledger.testing.ports import free_port
    from tests.waiting import wait_until

    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(f"needs Spark: {reason}")
    port, log = free_port(), tmp_path / "master.log"
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
           "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOG_DIR": str(tmp_path)}
    env.pop("SPARK_CONF_DIR", None)
    with open(log, "wb") as out:
        master = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                                   "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
                                  stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_until(lambda: "I have been elected leader" in log.read_text(errors="replace") or master.poll() is not None,
                   what="the standalone master", timeout=120)
        assert master.poll() is None, log.read_text(errors="replace")[-2000:]
        yield f"spark://127.0.0.1:{port}"
    finally:
        os.killpg(master.pid, signal.SIGKILL)
        master.wait(30)


@pytest.mark.spark
def test_a_spark_write_with_a_cluster_master_and_sqlite_fails_at_planning(tmp_path, standalone_master):
    """A real driver JVM submitted to a real standalone master (it has no worker: planning needs no executor)."""
    master = standalone_master
    uri = f"sqlite://{tmp_path}/metadata.db"
    done = subprocess.run([sys.executable, "-c", SPARK_SCRIPT, master, uri, str(tmp_path / "spark.log")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ERROR "), done.stdout
    assert (f"InvalidConfigurationError: option metadataServiceUri={uri!r} is a SQLite file on the driver's host, "
            f"but spark.master={master!r} runs executors on other hosts") in done.stdout, done.stdout
    assert not (tmp_path / "metadata.db").exists()
