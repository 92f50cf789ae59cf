"""The notebooks under notebooks/: committed with the outputs of one clean run, in step with their cells; they run.

The committed notebooks carry the outputs and pictures of a real run
(``python notebooks/refresh.py`` writes them), so a reader on the web sees
results without running anything. They may not drift: their cells, outputs
aside, must be what ``notebooks/cells/`` builds, and their outputs those of one
run from the top with no error, no warning (stderr stream) and no path of the
machine that ran it.

Each notebook is also executed again, top to bottom, in a real kernel on this
interpreter (``conftest.execute_notebook``, a temp copy): a cell error fails
the test, and so does a warning in its outputs or any process the notebook
leaves behind. The notebooks check their own claims with ``assert`` (every
entry read back, the fenced writer refused, no duplicate after a restart ...);
the tests below also check that the outputs a reader is promised — tables,
pictures — are there.
"""
from __future__ import annotations

import json
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


#: pictures each committed notebook shows (02: rows per micro-batch; 03: fragments, re-replication, recovery)
PICTURES = {"01_quickstart.ipynb": 0, "02_streaming.ipynb": 1, "03_failure_and_recovery.ipynb": 3}


@pytest.mark.parametrize("file_name", ALL_NOTEBOOKS)
def test_committed_notebook_carries_the_outputs_of_one_clean_run(file_name):
    notebook = nbformat.read(NOTEBOOK_DIR / file_name, as_version=4)
    nbformat.validate(notebook)
    problems = build_notebooks.committed_problems(file_name)
    assert not problems, f"{file_name}: " + "; ".join(problems) + " (python notebooks/refresh.py re-runs it)"
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert sum(bool(cell.outputs) for cell in code) >= len(code) - 1, f"{file_name}: cells without outputs"
    assert len(outputs_of(notebook, "image/png")) == PICTURES[file_name], f"{file_name}: pictures missing"
    assert "execution" not in json.dumps([cell.metadata for cell in code]), "timings are noise in a diff"


def test_committed_notebooks_match_their_cells():
    stale = build_notebooks.stale_notebooks()
    assert not stale, f"{stale} differ from notebooks/cells/: run python notebooks/refresh.py"


def test_a_changed_cell_makes_the_committed_notebook_stale():
    name = "03_failure_and_recovery.ipynb"
    notebook = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    assert not build_notebooks.is_stale(notebook, name)
    notebook.cells[1].source += "\nprint('one more line')"
    assert build_notebooks.is_stale(notebook, name)


def test_the_output_check_finds_warnings_errors_machine_paths_and_partial_runs():
    cells = [nbformat.v4.new_code_cell("a", execution_count=1, outputs=[
                 nbformat.v4.new_output("stream", name="stderr", text="FutureWarning: careful\n")]),
             nbformat.v4.new_code_cell("b", execution_count=2, outputs=[
                 nbformat.v4.new_output("stream", name="stdout", text="saved in /home/someone/x\n")]),
             nbformat.v4.new_code_cell("c", execution_count=3, outputs=[
                 nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])]),
             nbformat.v4.new_code_cell("d")]
    problems = build_notebooks.output_problems(nbformat.v4.new_notebook(cells=cells), ("/home/someone",))
    assert any("execution counts" in problem for problem in problems)
    assert any("cell 0 wrote to stderr: FutureWarning" in problem for problem in problems)
    assert any("cell 1 shows the path /home/someone" in problem for problem in problems)
    assert any("cell 2 raised ValueError: bad" in problem for problem in problems)
    clean = [nbformat.v4.new_code_cell("a", execution_count=1, outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="fine\n")])]
    assert build_notebooks.output_problems(nbformat.v4.new_notebook(cells=clean), ("/home/someone",)) == []


def assert_no_warnings(run, file_name):
    problems = build_notebooks.output_problems(run.notebook)
    assert not problems, f"{file_name} run: " + "; ".join(problems)


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
    assert_no_warnings(run, "03_failure_and_recovery.ipynb")
    assert os.path.samefile(run.kernel_executable, sys.executable)
    assert started(run, "bookie_server"), "the notebook should have started real bookie processes"
    assert len(outputs_of(run.notebook, "image/png")) == 3, "fragments, re-replication and recovery pictures"
    assert len(outputs_of(run.notebook, "text/html")) >= 3, "the metadata tables are missing"
    text = printed_text(run.notebook)
    assert "the old writer is refused: LedgerFencedError" in text
    assert "killed (exit status -9)" in text
    assert re.search(r"entries \d+\.\.\d+: bookie \d -> bookie \d, \d+ entries copied", text), "re-replication"
    assert re.search(r"recovery read from entry \d+, .* and closed the ledger at entry \d+", text), "recovery"


@needs_spark
@pytest.mark.spark
@pytest.mark.timeout(SPARK_TIMEOUT_S)
def test_quickstart_notebook_runs(run_notebook):
    run = run_notebook("01_quickstart.ipynb")
    assert_no_warnings(run, "01_quickstart.ipynb")
    assert os.path.samefile(run.kernel_executable, sys.executable)
    assert started(run, "bookie_server") and started(run, "java"), "bookies and Spark's JVM should have run"
    assert len(outputs_of(run.notebook, "text/html")) >= 5, "the data and metadata tables are missing"
    assert "rows in the stream now: 20000" in printed_text(run.notebook)


@needs_spark
@pytest.mark.spark
@pytest.mark.timeout(SPARK_TIMEOUT_S)
def test_streaming_notebook_runs(run_notebook):
    run = run_notebook("02_streaming.ipynb")
    assert_no_warnings(run, "02_streaming.ipynb")
    assert os.path.samefile(run.kernel_executable, sys.executable)
    assert started(run, "bookie_server") and started(run, "java"), "bookies and Spark's JVM should have run"
    assert outputs_of(run.notebook, "image/png"), "the rows-per-micro-batch plot is missing"
    assert len(outputs_of(run.notebook, "text/html")) >= 3, "the micro-batch tables are missing"
    assert "no duplicates, none missing" in printed_text(run.notebook)
