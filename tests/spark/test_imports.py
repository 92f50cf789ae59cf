"""Importing the package and the connector's pure modules never imports pyspark.

Spark's data source lookup imports every top-level ``pyspark_*`` module when a
session first touches Python data sources, and users without Spark use the
client: both need ``import pyspark_ledger`` to stay light.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

PURE = ["pyspark_ledger", "pyspark_ledger.spark", "pyspark_ledger.spark.options",
        "pyspark_ledger.spark.offsets", "pyspark_ledger.spark.planning", "pyspark_ledger.log",
        "pyspark_ledger.log.positions", "pyspark_ledger.log.log_spans"]
ARROW_ONLY = ["pyspark_ledger.spark.schema", "pyspark_ledger.spark.arrow_codec", "pyspark_ledger.log.stream_schema",
              "pyspark_ledger.testing.spark"]


def loaded_after_import(module: str) -> set[str]:
    code = (f"import sys, {module}\n"
            "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_neither_pyspark_nor_pyarrow(module):
    loaded = loaded_after_import(module)
    assert "pyspark" not in loaded and "pyarrow" not in loaded and "py4j" not in loaded


@pytest.mark.parametrize("module", ARROW_ONLY)
def test_arrow_modules_do_not_import_pyspark(module):
    assert "pyspark" not in loaded_after_import(module)
