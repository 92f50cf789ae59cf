"""The notebooks under notebooks/: committed clean and in step with their cells, and they run.

Each notebook is executed top to bottom in a real kernel on this interpreter
(``conftest.execute_notebook``): a cell error fails the test, and so does any
process the notebook leaves behind. The notebooks check their own claims with
``assert`` (every entry read back, the fenced writer refused, no duplicate
after a restart ...); the tests below also check that the outputs a reader is
promised — tables, pictures — are there.
"""
from __future__ import annotations

import os
import re
import sys

import nbclient.exceptions
import nbformat
import pytest

from pyspark_ledger.testing.spark import spark_unavailable_reason
from tests.notebooks.conftest import NOTEBOOK_DIR, command_line, execute_notebook, outputs_of, printed_text

sys.path.insert(0, str(NOTEBOOK_DIR))
try:
    import build_notebooks  # notebooks/ is not a package
finally:
    sys.path.remove(str(NOTEBOOK_DIR))

ALL_NOTEBOOKS = list(build_notebooks.NOTEBOOKS)
INTERNAL_MODULES = ("pyspark_ledger.client.", "pyspark_ledger.protocol", "pyspark_ledger.metadata.",
                    "pyspark_ledger.spark.", "pyspark_ledger.log.", "bookie_server")
SPARK_TIMEOUT_S = 900  # generous: other test runs share the machine (docs/measurements.md, "Spark start-up")
NO_SPARK = spark_unavailable_reason()
needs_spark = pytest.mark.skipif(bool(NO_SPARK), reason=f"this notebook needs Spark: {NO_SPARK}")


def started(run, program: str) -> bool:
    """True if the notebook's kernel ran a process whose command line mentions ``program``."""
    return any(program in info.command for info in run.processes_seen)


@pytest.mark.parametrize("file_name", ALL_NOTEBOOKS)
def test_committed_notebook_has_no_outputs_or_execution_counts(file_name):
    notebook = nbformat.read(NOTEBOOK_DIR / file_name, as_version=4)
    nbformat.validate(notebook)
    dirty = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None or "execution" in cell.metadata)]
    assert not dirty, (f"{file_name}: cells {dirty} carry outputs or execution counts; strip them "
                       "(python notebooks/build_notebooks.py rewrites every notebook clean)")


def test_committed_notebooks_match_their_cells():
    stale = build_notebooks.stale_notebooks()
    assert not stale, f"{stale} differ from notebooks/cells/: run python notebooks/build_notebooks.py"


@pytest.mark.parametrize("file_name", ALL_NOTEBOOKS)
def test_notebook_uses_only_the_public_api(file_name):
    cells = nbformat.read(NOTEBOOK_DIR / file_name, as_version=4).cells
    code = "\n".join(cell.source for cell in cells if cell.cell_type == "code")
    used = [name for name in INTERNAL_MODULES if name in code]
    assert not used, f"{file_name} uses internal modules {used}; notebooks show the public API only"


def scratch_notebook(tmp_path, *sources: str):
    """A notebook of code cells ``sources`` in ``tmp_path/src``; returns its path and a work dir."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])
    (tmp_path / "src").mkdir()
    (tmp_path / "run").mkdir()
    path = tmp_path / "src" / "scratch.ipynb"
    nbformat.write(notebook, path)
    return path, tmp_path / "run"


SLEEPER = ("import subprocess, sys, pathlib\n"
           "sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
           "pathlib.Path('sleeper.pid').write_text(str(sleeper.pid))")


def sleeper_running(work) -> bool:
    pid = int((work / "sleeper.pid").read_text())
    return "time.sleep(120)" in command_line(pid)


def test_the_runner_fails_a_notebook_that_leaves_a_process_running_and_ends_it(tmp_path):
    path, work = scratch_notebook(tmp_path, SLEEPER)
    with pytest.raises(AssertionError, match=r"left processes running after its last cell: pid \d+: .*sleep"):
        execute_notebook(path, work)
    assert not sleeper_running(work)


def test_the_runner_fails_a_notebook_whose_cell_raises_and_ends_its_processes(tmp_path):
    path, work = scratch_notebook(tmp_path, SLEEPER, "raise ValueError('this cell fails')", "never = 'run'")
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="this cell fails"):
        execute_notebook(path, work)
    assert not sleeper_running(work)


def test_failure_and_recovery_notebook_runs(run_notebook):
    run = run_notebook("03_failure_and_recovery.ipynb")
    assert os.path.samefile(run.kernel_executable, sys.executable)
    assert started(run, "bookie_server"), "the notebook should have started real bookie processes"
    assert outputs_of(run.notebook, "image/png"), "the picture of the fragments is missing"
    assert len(outputs_of(run.notebook, "text/html")) >= 3, "the metadata tables are missing"
    text = printed_text(run.notebook)
    assert "the old writer is refused: LedgerFencedError" in text
    assert "killed (exit status -9)" in text
    assert re.search(r"entries \d+\.\.\d+: bookie \d -> bookie \d, \d+ entries copied", text), "re-replication"


@needs_spark
@pytest.mark.spark
@pytest.mark.timeout(SPARK_TIMEOUT_S)
def test_quickstart_notebook_runs(run_notebook):
    run = run_notebook("01_quickstart.ipynb")
    assert os.path.samefile(run.kernel_executable, sys.executable)
    assert started(run, "bookie_server") and started(run, "java"), "bookies and Spark's JVM should have run"
    assert len(outputs_of(run.notebook, "text/html")) >= 5, "the data and metadata tables are missing"
    assert "rows in the stream now: 20000" in printed_text(run.notebook)


@needs_spark
@pytest.mark.spark
@pytest.mark.timeout(SPARK_TIMEOUT_S)
def test_streaming_notebook_runs(run_notebook):
    run = run_notebook("02_streaming.ipynb")
    assert os.path.samefile(run.kernel_executable, sys.executable)
    assert started(run, "bookie_server") and started(run, "java"), "bookies and Spark's JVM should have run"
    assert outputs_of(run.notebook, "image/png"), "the rows-per-micro-batch plot is missing"
    assert len(outputs_of(run.notebook, "text/html")) >= 3, "the micro-batch tables are missing"
    assert "no duplicates, none missing" in printed_text(run.notebook)
