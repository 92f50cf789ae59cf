"""A ``sqlite:///`` metadata store with a Spark master that runs executors on other hosts: refused at planning.

A SQLite store is a file on the driver's host. Executors of a cluster master
(``spark://``, ``yarn``, ``k8s://``) run on other hosts and cannot open it:
without this check the job would plan, then every task would fail on its
executor (``executor._no_store_here``). ``check_metadata_reachable`` refuses
such a read or write on the driver, at planning, with InvalidConfigurationError
naming the option and saying to use ZooKeeper -- unless the option
``sqliteSharedFilesystem=true`` says the file is at the same path on every
executor host (one machine, e.g. a standalone master on it, or a shared
filesystem).

Where this runs -- Spark's Python planner workers on the driver -- Spark
passes neither its configuration nor a session, so ``driver_master`` reads the
master as spark-submit received it: the nearest ancestor process running
``org.apache.spark.deploy.SparkSubmit`` (the driver JVM, which pyspark starts
with ``--conf spark.master=...`` for a session built in Python) and, in
spark-submit's order, ``--master``, ``--conf spark.master=``, the properties
file (``--properties-file``, else ``spark-defaults.conf`` of
``$SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``) and ``$MASTER``. A master it
cannot find (a driver started some other way, a master set in code under
spark-submit) is None and nothing is refused; the executors' own error then
says the same. Masters starting with ``local`` (``local[2]``,
``local-cluster[...]``) keep every executor on the driver's host.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from pyspark_ledger.errors import InvalidConfigurationError

SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
SHARED_OPTION = "sqliteSharedFilesystem"
#: spark-submit options that take no value; every other option takes one (``--name app`` or ``--name=app``).
_FLAGS = frozenset({"--verbose", "-v", "--supervise", "--help", "-h", "--version", "--usage-error"})
#: Ancestors looked at (a planner worker is the JVM's child, or its daemon's).
MAX_ANCESTORS = 6
MAX_PROPERTIES_BYTES = 1 << 20


def is_local_master(master: str) -> bool:
    return master.strip().lower().startswith("local")


def check_metadata_reachable(uri: str, shared: bool, master: str | None = None) -> None:
    """InvalidConfigurationError for a sqlite:/// ``uri`` with a cluster master, unless ``shared``.

    ``master`` defaults to ``driver_master()``."""
    if not uri.startswith("sqlite:") or shared:
        return
    master = driver_master() if master is None else master
    if master is None or is_local_master(master):
        return
    raise InvalidConfigurationError(
        f"option metadataServiceUri={uri!r} is a SQLite file on the driver's host, but spark.master={master!r} runs "
        "executors on other hosts, which cannot open it: use ZooKeeper metadata (zk://host:port[,host:port...]/"
        f"chroot) reachable from the driver and every executor (docs/cluster.md). If the file is at this same path "
        f"on every executor host (a single machine, or a shared filesystem), set option {SHARED_OPTION}=true")


def driver_master(pid: int | None = None) -> str | None:
    """The master the driver JVM above this process was submitted with, or None (see the module docstring)."""
    args = _submit_args(os.getpid() if pid is None else pid)
    if args is None:
        return None
    return master_from_args(args, os.environ)


def master_from_args(args: Sequence[str], env: Mapping[str, str]) -> str | None:
    """spark-submit's master for its arguments (those after the class name) and environment."""
    master, conf_master, properties_file = None, None, None
    index = 0
    while index < len(args):
        arg = args[index]
        if not arg.startswith("-"):
            break  # the primary resource (pyspark-shell, app.py, app.jar): the rest is the application's
        name, has_value, value = arg.partition("=")
        if name in _FLAGS:
            index += 1
            continue
        if not has_value:
            value = args[index + 1] if index + 1 < len(args) else ""
            index += 1
        index += 1
        if name == "--master":
            master = value
        elif name in ("--conf", "-c") and value.split("=", 1)[0].strip() == "spark.master":
            conf_master = value.split("=", 1)[1] if "=" in value else None
        elif name == "--properties-file":
            properties_file = value
    return master or conf_master or _properties_master(properties_file, env) or env.get("MASTER") or None


def _submit_args(pid: int) -> list[str] | None:
    """The arguments after SparkSubmit's class name in the command line of the nearest such ancestor."""
    for _ in range(MAX_ANCESTORS):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        words = [word.decode("utf-8", "replace") for word in argv]
        if SUBMIT_CLASS in words:
            return words[words.index(SUBMIT_CLASS) + 1:]
        if pid <= 1:
            return None
    return None


def _properties_master(path: str | None, env: Mapping[str, str]) -> str | None:
    """spark.master of the properties file spark-submit reads, if any."""
    if path is None:
        conf_dir = env.get("SPARK_CONF_DIR") or (f"{env['SPARK_HOME']}/conf" if env.get("SPARK_HOME") else None)
        path = f"{conf_dir}/spark-defaults.conf" if conf_dir else None
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(MAX_PROPERTIES_BYTES)
    except OSError:
        return None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("spark.master") and line[len("spark.master"):][:1] in (" ", "\t", "=", ":"):
            return line[len("spark.master"):].strip(" \t=:") or None
    return None
