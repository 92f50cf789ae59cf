"""Running a notebook the way a user would: a real Jupyter kernel on this interpreter, every cell, in order.

``run_notebook(path)`` copies the notebook into the test's temp dir, starts a
python3 kernel whose argv is ``sys.executable`` (a kernelspec written for the
run, so no other Python installed on the machine can be picked), executes
every cell with nbclient (any cell error fails the test with the cell and its
traceback), and watches the processes the kernel starts:

- after each cell it records the kernel's live descendants (bookies, a writer
  child, Spark's JVM and Python workers ...);
- after the last cell, while the kernel is still up, none of them may be alive
  and the kernel may have no live descendant at all: a notebook stops what it
  starts. (The check runs before the kernel shuts down, which could take
  them down with it and hide the leak.)

The kernel also samples its descendants every ``SAMPLE_S`` s, and whatever the
outcome, the runner ends every process it saw that still runs (by pid, start
time checked): a failing notebook never strands its bookies or JVM, which a
kernel shutdown does not stop. Temp files of the kernel (``TMPDIR``: sandbox
dirs, checkpoints) go to the test's temp dir.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat (pip install '.[test]')")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need nbclient (pip install '.[test]')")
pytest.importorskip("ipykernel", reason="the notebook tests need ipykernel (pip install '.[test]')")

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
KERNEL_NAME = "pyspark-ledger-tests"
CELL_TIMEOUT_S = 180
STARTUP_TIMEOUT_S = 120
SAMPLE_S = 0.5
END_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    start_ticks: int  # /proc/PID/stat field 22: tells a reused pid from the original process
    command: str


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from 3 (state) on; the command name may hold spaces


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _live_processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start ticks) of every process that is not a zombie."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) and fields[0] != "Z":
            found[int(entry)] = (int(fields[1]), int(fields[19]))
    return found


def descendants(root: int) -> list[ProcessInfo]:
    """Live (non-zombie) descendants of ``root``."""
    table = _live_processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _ticks) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(ProcessInfo(pid, table[pid][1], command_line(pid)))
        todo.extend(children.get(pid, []))
    return found


def is_alive(info: ProcessInfo) -> bool:
    fields = _stat_fields(info.pid)
    return fields is not None and fields[0] != "Z" and int(fields[19]) == info.start_ticks


@dataclass
class ProcessWatch:
    """Every process seen under the kernel (after each cell, and by the sampler); thread-safe."""

    kernel_pid: int
    seen: dict[tuple[int, int, str], ProcessInfo] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self) -> list[ProcessInfo]:
        current = descendants(self.kernel_pid)
        with self.lock:  # keyed by command too: a process that execs (spark-submit -> java) is seen as each
            for info in current:
                self.seen.setdefault((info.pid, info.start_ticks, info.command), info)
        return current

    def all_seen(self) -> list[ProcessInfo]:
        with self.lock:
            return list(self.seen.values())

    def leftovers(self) -> list[ProcessInfo]:
        """Everything seen that still runs (the kernel's live descendants included)."""
        self.record()
        alive = {(info.pid, info.start_ticks): info for info in self.all_seen() if is_alive(info)}
        return list(alive.values())


def write_kernelspec(root: Path) -> Path:
    """A kernelspec dir whose kernel runs ``sys.executable -m ipykernel_launcher``."""
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python ({sys.executable})", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return root / "kernels"


@dataclass
class NotebookRun:
    notebook: object  # the executed nbformat NotebookNode
    kernel_executable: str
    processes_seen: list[ProcessInfo]


class Sampler:
    """Records the kernel's descendants every ``SAMPLE_S`` s, so a cell that hangs or fails is covered too."""

    def __init__(self, watch: ProcessWatch) -> None:
        self.watch = watch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notebook-process-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.watch.record()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def end_processes(infos: list[ProcessInfo]) -> None:
    """SIGKILL processes this test's kernel started and left behind (pid and start time checked); wait."""
    for info in infos:
        if is_alive(info):
            os.kill(info.pid, signal.SIGKILL)
    deadline = time.monotonic() + END_TIMEOUT_S
    while any(is_alive(info) for info in infos) and time.monotonic() < deadline:
        time.sleep(0.05)


def kernel_env(work_dir: Path) -> dict[str, str]:
    """The kernel's environment: ours, with temp files (sandbox dirs, checkpoints) under ``work_dir``, and
    this checkout first on its path (the kernel runs in ``work_dir``, outside the checkout)."""
    tmp = work_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": python_path}


def execute_notebook(source: Path, work_dir: Path) -> NotebookRun:
    """Execute a temp copy of ``source`` in ``work_dir`` (see the module docstring)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    copy = work_dir / source.name
    shutil.copyfile(source, copy)
    notebook = nbformat.read(copy, as_version=4)
    spec_manager = KernelSpecManager(kernel_dirs=[str(write_kernelspec(work_dir / "kernelspec"))])
    manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=spec_manager, ip="127.0.0.1")
    state: dict = {}
    last_index = max(i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code")

    def kernel_started(**_ignored) -> None:
        state["watch"] = ProcessWatch(manager.provisioner.pid)
        state["executable"] = os.path.realpath(f"/proc/{manager.provisioner.pid}/exe")
        state["sampler"] = Sampler(state["watch"])

    def after_cell(cell, cell_index, **_ignored) -> None:
        state["watch"].record()
        if cell_index == last_index:
            state["leftovers"] = state["watch"].leftovers()

    client = nbclient.NotebookClient(
        notebook, km=manager, timeout=CELL_TIMEOUT_S, startup_timeout=STARTUP_TIMEOUT_S,
        resources={"metadata": {"path": str(work_dir)}}, on_notebook_start=kernel_started,
        on_cell_executed=after_cell)
    try:
        client.execute(env=kernel_env(work_dir))
    finally:
        if "sampler" in state:
            state["sampler"].stop()
            end_processes(state["watch"].leftovers())  # a failed run's bookies, JVM ...
    leftovers = state.get("leftovers")
    assert leftovers is not None, f"{source.name}: the last code cell was never executed"
    assert not leftovers, f"{source.name} left processes running after its last cell: " + "; ".join(
        f"pid {info.pid}: {info.command[:200]}" for info in leftovers)
    return NotebookRun(notebook, state["executable"], state["watch"].all_seen())


def outputs_of(notebook, mime: str) -> list:
    """Every output of the executed notebook carrying ``mime`` data (e.g. 'image/png', 'text/html')."""
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
            if mime in output.get("data", {})]


def printed_text(notebook) -> str:
    """All stdout of the executed notebook, concatenated."""
    return "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for output in cell.outputs if output.get("name") == "stdout")


@pytest.fixture
def run_notebook(tmp_path):
    """``run_notebook(file_name)`` -> NotebookRun of ``notebooks/<file_name>`` executed in a temp dir."""
    def run(file_name: str) -> NotebookRun:
        return execute_notebook(NOTEBOOK_DIR / file_name, tmp_path)
    return run
