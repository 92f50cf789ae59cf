"""The per-process client cache that every task of a Spark worker shares (``pyspark_ledger.spark.executor``)."""
from __future__ import annotations

import os
import sys

import pytest

from pyspark_ledger.errors import InvalidConfigurationError, LedgerClosedError, NoSuchMetadataStoreError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.spark import executor


def new_store(location: str) -> str:
    """Create an empty store at ``location`` (clients open existing stores only) and return it."""
    open_metadata_store(location, create=True).close()
    return location


@pytest.fixture
def uri(tmp_path):
    """A metadata store of its own (no bookies needed to open clients); its clients closed at teardown."""
    location = new_store(f"sqlite:///{tmp_path}/metadata.db")
    try:
        yield location
    finally:
        executor.close_all(location)


def test_one_client_per_uri_and_one_stream_client_per_password(uri):
    first = executor.stream_client(uri, "secret")
    assert executor.stream_client(uri, b"secret") is first
    other = executor.stream_client(uri, "other")
    assert other is not first and other.client is first.client
    assert executor.ledger_client(uri, "anything") is first.client
    assert executor.stream_client(f"  {uri} ", "secret") is first


def test_cached_clients_wait_before_speculative_reads_and_keep_the_other_defaults(uri):
    from dataclasses import asdict

    from pyspark_ledger.client.config import ClientConfig

    config = executor.ledger_client(uri).config
    assert config.speculative_read_delay_s == executor.SPECULATIVE_READ_DELAY_S >= 1.0
    defaults = ClientConfig()
    changed = {name for name in asdict(config) if name != "placement"
               and getattr(config, name) != getattr(defaults, name)}
    assert changed == {"speculative_read_delay_s"}
    assert type(config.placement) is type(defaults.placement)


def test_close_all_of_a_uri_closes_its_clients_and_the_next_call_opens_new_ones(uri, tmp_path):
    other_uri = new_store(f"sqlite:///{tmp_path}/other.db")
    try:
        streams = executor.stream_client(uri, "pw")
        kept = executor.ledger_client(other_uri)
        executor.close_all(uri)
        with pytest.raises(LedgerClosedError):
            streams.client.list_ledgers()
        assert kept.list_ledgers() == []
        fresh = executor.stream_client(uri, "pw")
        assert fresh is not streams and fresh.list_streams() == []
    finally:
        executor.close_all(other_uri)


def test_a_forked_child_does_not_reuse_its_parents_clients(uri):
    executor.ledger_client(uri)
    before = executor.cached_clients()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it sees, touch nothing else
        os.close(read_end)
        os.write(write_end, str(executor.cached_clients()).encode())
        os._exit(0)
    os.close(write_end)
    try:
        seen = int(os.read(read_end, 32).decode())
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    assert before >= 1 and seen == 0
    assert executor.cached_clients() == before  # the parent keeps its own


@pytest.mark.parametrize("bad_uri", ["", "   ", None])
def test_a_missing_uri_is_refused_naming_the_option(bad_uri):
    with pytest.raises(InvalidConfigurationError, match="metadataServiceUri must be a non-empty metadata URI"):
        executor.stream_client(bad_uri, "pw")


def test_a_password_of_the_wrong_type_is_refused(uri):
    with pytest.raises(InvalidConfigurationError, match="password must be bytes or str, got int"):
        executor.stream_client(uri, 7)


FREEZE_PROBE = """
import gc, sys
from pyspark_ledger.spark import executor
uri = sys.argv[1]
executor.ledger_client(uri)
first = gc.get_freeze_count()
executor.ledger_client(uri + "-other")  # a second client, no module imported since: no second freeze
junk = [[] for _ in range(1000)]
executor.ledger_client(uri)
second = gc.get_freeze_count()
import weakref
gc.disable()  # only the executor's own collection may find the cycle below
class Cycle: pass
cycle = Cycle(); cycle.me = cycle; cycle_ref = weakref.ref(cycle); del cycle  # garbage only a collection finds
import xml.dom.minidom  # a task's work imported modules (a first read imports the reader's)
after_import = len(gc.get_objects())
executor.stream_client(uri)
third = gc.get_freeze_count()
collected = int(cycle_ref() is None)
executor.ledger_client(uri)
fourth = gc.get_freeze_count()
executor.close_all()
print(first, second, after_import, third, fourth, collected)
"""


@pytest.mark.parametrize("reused, frozen", [("1", True), (None, False)])
def test_a_reused_spark_worker_freezes_what_exists_when_it_opens_its_first_client_and_after_imports(
        tmp_path, reused, frozen):
    import subprocess
    import sys

    from pyspark_ledger.testing.bookies import child_env

    env = child_env()
    env.pop(executor.REUSED_WORKER_ENV, None)
    if reused:
        env[executor.REUSED_WORKER_ENV] = reused
    probed = new_store(f"sqlite:///{tmp_path}/metadata.db")
    new_store(probed + "-other")  # the probe's second client
    done = subprocess.run([sys.executable, "-c", FREEZE_PROBE, probed], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    first, second, after_import, third, fourth, collected = map(int, done.stdout.split())
    if frozen:
        assert first > 10_000 and second == first, "frozen at the first client (modules and all), not again"
        # after the import, the next getter froze the new module's objects (and the junk, alive), once
        assert third - second >= max(1000, after_import // 2) and fourth == third
        assert collected, "garbage is collected before a freeze, never frozen"
    else:
        assert first == second == 0, "outside Spark's reused workers nothing is frozen"


def test_a_sqlite_file_missing_where_the_task_runs_says_to_use_zookeeper(tmp_path):
    """An executor on another host than the driver's SQLite file finds no file there: the error names the host
    and says what a cluster needs instead."""
    uri = f"sqlite:///{tmp_path}/on-the-driver-host.db"
    before = executor.cached_clients()
    with pytest.raises(NoSuchMetadataStoreError) as error:
        executor.ledger_client(uri)
    text = str(error.value)
    assert uri in text and "on-the-driver-host.db" in text and "on host " in text
    assert "use ZooKeeper metadata (zk://" in text and "docs/cluster.md" in text
    assert executor.cached_clients() == before


MALLOC_PROBE = """
import os, sys
from pyspark_ledger.spark import executor
statm = os.open("/proc/self/statm", os.O_RDONLY)
def resident_mib():  # no allocation from glibc's heap, so none above the block
    os.lseek(statm, 0, os.SEEK_SET)
    return int(os.read(statm, 200).split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
executor.ledger_client(sys.argv[1])
block = b"x" * (8 << 20)  # a read answer's size
with_block = resident_mib()
del block
print(round(with_block - resident_mib(), 1))  # MiB the free gave back to the kernel
executor.close_all()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")
@pytest.mark.parametrize("reused, kept", [("1", True), (None, False)])
def test_a_reused_spark_worker_keeps_freed_read_answers_for_the_next(tmp_path, reused, kept):
    import subprocess

    from pyspark_ledger.testing.bookies import child_env

    env = {key: value for key, value in child_env().items()
           if key != "GLIBC_TUNABLES" and not key.startswith("MALLOC_") and key != executor.REUSED_WORKER_ENV}
    if reused:
        env[executor.REUSED_WORKER_ENV] = reused
    probed = new_store(f"sqlite:///{tmp_path}/metadata.db")
    done = subprocess.run([sys.executable, "-c", MALLOC_PROBE, probed], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    given_back = float(done.stdout.split()[0])
    assert given_back == pytest.approx(0 if kept else 8, abs=1), done.stdout
