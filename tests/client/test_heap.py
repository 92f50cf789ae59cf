"""client.heap: the process keeps freed memory once a writer sends a large entry, unless told not to."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_ledger.client import ClientConfig
from pyspark_ledger.client.heap import keep_freed_memory
from pyspark_ledger.errors import InvalidConfigurationError

ROOT = Path(__file__).resolve().parents[2]
# the module alone, by its path: importing the client package (gRPC, protobuf) would take most of each child's time
LOAD = ("import importlib.util as u; s = u.spec_from_file_location('heap', {path!r}); m = u.module_from_spec(s); "
        "s.loader.exec_module(m); k = m.keep_freed_memory; ").format(path=str(ROOT / "pyspark_ledger/client/heap.py"))


def run_child(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter (the tuning is once per process) and return what it printed."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    environment.update(env)
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60,
                          check=True)
    return done.stdout.strip()


def test_switched_off_it_leaves_the_process_alone():
    assert keep_freed_memory(False) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_on_glibc_it_is_applied_once_per_process():
    code = LOAD + "print(k(), k())"
    assert run_child(code) == "True True"


def test_thresholds_chosen_in_the_environment_win():
    code = LOAD + "print(k())"
    assert run_child(code, MALLOC_TRIM_THRESHOLD_="131072") == "False"
    assert run_child(code, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072") == "False"


def test_the_option_must_be_a_boolean():
    with pytest.raises(InvalidConfigurationError, match="keep_freed_memory must be True or False"):
        ClientConfig(keep_freed_memory="yes")
