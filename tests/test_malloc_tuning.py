"""glibc's malloc thresholds (pyspark_ledger.malloc_tuning): a freed 8 MiB block stays with the process for the
next one instead of going back to the kernel, unless the environment chose the thresholds; observed through the
process's resident memory in a fresh interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pyspark_ledger import malloc_tuning

PROBE = """
import os, sys
from pyspark_ledger.malloc_tuning import raise_thresholds
statm = os.open("/proc/self/statm", os.O_RDONLY)
def resident_mib():  # no allocation from glibc's heap (small objects are Python's own), so none above the block
    os.lseek(statm, 0, os.SEEK_SET)
    return int(os.read(statm, 200).split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
applied = raise_thresholds(32 << 20, 32 << 20) if sys.argv[1] == "raise" else None
block = b"x" * (8 << 20)  # every page touched
with_block = resident_mib()
del block  # at the top of the heap: trimmed past the trim threshold
print(applied, round(with_block - resident_mib(), 1))  # MiB given back by the free
"""


def clean_env(**extra: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "GLIBC_TUNABLES" and not key.startswith("MALLOC_")}
    return {**env, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def probe(mode: str, **extra: str) -> tuple[str, float]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], env=clean_env(**extra), capture_output=True, text=True,
                          check=True, timeout=60)
    applied, given_back = done.stdout.split()
    return applied, float(given_back)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")
def test_a_freed_block_stays_with_the_process_once_the_thresholds_are_raised():
    assert probe("default") == ("None", pytest.approx(8, abs=1))  # glibc's defaults: unmapped at once
    assert probe("raise") == ("True", pytest.approx(0, abs=1))  # kept for the next block
    assert probe("raise", MALLOC_TRIM_THRESHOLD_="1000") == ("False", pytest.approx(8, abs=1))  # the user's choice


def test_the_environment_s_choices_are_recognised():
    assert not malloc_tuning.chosen_by_environment({})
    assert malloc_tuning.chosen_by_environment({"MALLOC_ARENA_MAX": "2"})
    assert malloc_tuning.chosen_by_environment({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"})
    assert not malloc_tuning.chosen_by_environment({"GLIBC_TUNABLES": "glibc.rtld.nns=4"})


@pytest.mark.parametrize("mmap_threshold, trim_threshold, arena_max, limit", [
    (0, 1 << 20, None, "mmap_threshold must be 1..33554432 bytes"),
    (64 << 20, 64 << 20, None, "mmap_threshold must be 1..33554432 bytes"),
    (8 << 20, 4 << 20, None, "trim_threshold must be 8388608..1073741824 bytes"),
    (8 << 20, 2 << 30, None, "trim_threshold must be 8388608..1073741824 bytes"),
    (8 << 20, 8 << 20, 0, "arena_max must be at least 1"),
])
def test_thresholds_out_of_range_are_refused_naming_the_limit(mmap_threshold, trim_threshold, arena_max, limit):
    with pytest.raises(ValueError, match=limit):
        malloc_tuning.raise_thresholds(mmap_threshold, trim_threshold, arena_max)
