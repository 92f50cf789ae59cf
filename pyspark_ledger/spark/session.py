"""A local SparkSession ready for the ``ledger`` source, and its clean stop: the public helper.

For notebooks, scripts and trying things out on one machine::

    from pyspark_ledger.spark import spark_session, stop_spark_session

    spark = spark_session("my-app")
    try:
        spark.read.format("ledger").option("metadataServiceUri", uri).load("events").show()
    finally:
        stop_spark_session(spark)

What ``spark_session`` sets up:

- local mode on ``cores`` cores, bound to 127.0.0.1, no UI, no console progress bar,
  (``conf`` may name a cluster instead: ``spark.master`` = ``spark://host:7077`` with
  ``spark.driver.host`` and ``spark.driver.bindAddress`` = an address of this host the
  executors can reach; the driver then binds there, ``SPARK_LOCAL_IP`` included),
  few shuffle partitions; the Python workers run this interpreter, so they import
  the same pyspark-ledger (whose ``ledger`` source Spark finds by itself);
- quiet logs: the JVM's output (its start-up banner, log4j, the Python workers'
  stderr) goes to ``log_file`` (default: ``pyspark-ledger-spark-<pid>.log`` in the
  temp dir), at ``log_level`` (ERROR) once started; ``log_file=None`` leaves it on
  this process's stderr;
- PySpark's "does not yet fully support pandas >= 3.0.0" FutureWarning is silenced,
  in this process and in Spark's Python workers: pyspark-ledger asks for pandas < 3
  (its ``spark`` extra), and this keeps a session quiet where pandas 3 is installed
  anyway. Every other warning is left alone.

``stop_spark_session`` stops the session and ends the JVM pyspark launched for it,
so nothing outlives the caller (``SparkSession.stop`` alone leaves the JVM running).
Importing this module never imports pyspark.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from pyspark_ledger.errors import InvalidConfigurationError

LOCAL_IP = "127.0.0.1"
#: Settings every session gets (``conf`` overrides them).
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": LOCAL_IP,
    "spark.driver.bindAddress": LOCAL_IP,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.schemaInference": "false",
    "spark.python.worker.reuse": "true",
}
#: The start of PySpark's warning about pandas >= 3 (pyspark.sql.pandas.utils).
PANDAS_WARNING = "PySpark does not yet fully support pandas"
#: The same filter for Spark's Python workers, which read it from their environment.
PANDAS_WARNING_FILTER = f"ignore:{PANDAS_WARNING}:FutureWarning"
LOG_LEVELS = ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF", "TRACE")
_DEFAULT_LOG = object()
_JVM_EXIT_S = 20.0


def spark_unavailable_reason() -> str:
    """Why a local session cannot start here ('' when it can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'pyspark-ledger[spark]')"
    if not (os.environ.get("JAVA_HOME") or _on_path("java")):
        return "no Java runtime: install Java 17 or set JAVA_HOME"
    return ""


def default_log_file() -> Path:
    """Where a session's JVM writes its log unless told otherwise."""
    return Path(tempfile.gettempdir()) / f"pyspark-ledger-spark-{os.getpid()}.log"


def spark_session(app_name: str = "pyspark-ledger", *, cores: int = 2, conf: Mapping[str, Any] | None = None,
                  log_level: str = "ERROR", log_file: str | os.PathLike | None = _DEFAULT_LOG):
    """A local-mode SparkSession on 127.0.0.1 (see the module docstring); ``getOrCreate``, so an
    existing session is returned as it is. InvalidConfigurationError when Spark cannot start here
    (no pyspark, no Java) or an argument is out of range; a JVM that started but failed is ended."""
    reason = spark_unavailable_reason()
    if reason:
        raise InvalidConfigurationError(f"a Spark session needs {reason}")
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise InvalidConfigurationError(f"cores must be a whole number of cores >= 1, got {cores!r}")
    level = str(log_level).upper()
    if level not in LOG_LEVELS:
        raise InvalidConfigurationError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    from pyspark.sql import SparkSession

    quiet_pandas_warning()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    settings = {**DEFAULT_CONF, "spark.sql.warehouse.dir": _warehouse_dir(),
                **{str(key): str(value) for key, value in (conf or {}).items()}}
    os.environ["SPARK_LOCAL_IP"] = settings["spark.driver.bindAddress"]
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    log_path = default_log_file() if log_file is _DEFAULT_LOG else log_file
    try:
        with _stderr_to(log_path):
            spark = builder.getOrCreate()
    except BaseException:
        _end_process(_jvm_process(), kill=True)  # launched but never handed over: nobody else would stop it
        raise
    spark.sparkContext.setLogLevel(level)
    return spark


def stop_spark_session(spark) -> None:
    """Stop ``spark`` and the JVM process pyspark launched for it (bounded wait, then killed)."""
    from pyspark import SparkContext

    if SparkContext._gateway is None:  # stopped already (another user of the same getOrCreate session)
        return
    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    _end_process(process, kill=False)


def quiet_pandas_warning() -> None:
    """Silence PySpark's pandas >= 3 FutureWarning here and in Python workers started from now on."""
    warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
    current = os.environ.get("PYTHONWARNINGS", "")
    if PANDAS_WARNING_FILTER not in current.split(","):
        os.environ["PYTHONWARNINGS"] = f"{current},{PANDAS_WARNING_FILTER}" if current else PANDAS_WARNING_FILTER


@contextmanager
def _stderr_to(path: str | os.PathLike | None) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` meanwhile (None: leave it): the JVM launched meanwhile keeps it."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def _jvm_process() -> subprocess.Popen | None:
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def _end_process(process: subprocess.Popen | None, *, kill: bool) -> None:
    if process is None or process.poll() is not None:
        return
    if kill:
        process.kill()
    elif process.stdin is not None:
        process.stdin.close()  # the gateway JVM exits when its stdin closes
    try:
        process.wait(timeout=_JVM_EXIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=_JVM_EXIT_S)


def _warehouse_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"pyspark-ledger-warehouse-{os.getpid()}")


def _on_path(program: str) -> bool:
    return any(os.access(os.path.join(folder, program), os.X_OK)
               for folder in os.environ.get("PATH", "").split(os.pathsep) if folder)
