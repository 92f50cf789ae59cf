"""Builds every notebook from ``notebooks/cells/``, executes it, and saves it with its outputs.

    python notebooks/refresh.py                       # all notebooks
    python notebooks/refresh.py 03_failure_and_recovery.ipynb

Run it from a checkout after changing a notebook's cells (or the code it shows), and commit the
notebooks it writes: the committed notebooks carry the outputs and pictures of that real run, so a
reader on the web sees results without running anything.

Each notebook runs in a fresh Jupyter kernel on this interpreter, with this checkout's code first
on its path, its working directory and temp files (``TMPDIR``: sandboxes, checkpoints, Spark's
log) in a temp dir that is removed afterwards. Outputs are saved without timings, with that temp
dir shown as ``/tmp``; the kernel's own messages go to a log shown only if the run fails. A notebook
whose run fails, or whose outputs hold an error, a warning (any
stderr stream) or a path of this machine, is not saved (exit status 1, the problems listed).
Spark's notebooks need Java 17 and take a few minutes each.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_notebooks  # noqa: E402  (notebooks/ is not a package)

REPO_ROOT = build_notebooks.NOTEBOOK_DIR.parent
KERNEL_NAME = "pyspark-ledger-refresh"
CELL_TIMEOUT_S = 600
STARTUP_TIMEOUT_S = 120


def execute(notebook: nbformat.NotebookNode, work_dir: Path) -> nbformat.NotebookNode:
    """Execute ``notebook`` in place in a kernel on this interpreter, inside ``work_dir``."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    kernels = work_dir / "kernels"
    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}))
    run_dir = work_dir / "run"
    tmp = work_dir / "tmp"
    run_dir.mkdir()
    tmp.mkdir()
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": python_path}
    manager = KernelManager(kernel_name=KERNEL_NAME, transport="ipc", ip=str(work_dir / "kernel-ipc"),
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    client = NotebookClient(notebook, km=manager, timeout=CELL_TIMEOUT_S, startup_timeout=STARTUP_TIMEOUT_S,
                            record_timing=False, resources={"metadata": {"path": str(run_dir)}})
    with open(work_dir / "kernel.log", "wb") as kernel_log:  # the kernel's own messages, shown if the run fails
        client.execute(env=env, stderr=kernel_log)
    return notebook


def scrub(notebook: nbformat.NotebookNode, work_dir: Path) -> None:
    """Show the run's temp dir as ``/tmp`` in outputs; drop what the run added to the notebook's metadata."""
    replacements = [(str(work_dir / "tmp"), build_notebooks.TMP_PLACEHOLDER),
                    (str(work_dir / "run"), build_notebooks.TMP_PLACEHOLDER)]

    def clean(text: str) -> str:
        for old, new in replacements:
            text = text.replace(old, new)
        return text

    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        for output in cell.outputs:
            if "text" in output:
                output.text = clean(output.text)
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/") and isinstance(value, str):
                    output.data[mime] = clean(value)
    notebook.metadata = {"kernelspec": dict(build_notebooks.KERNELSPEC),
                         "language_info": dict(build_notebooks.LANGUAGE_INFO)}


def refresh(file_name: str) -> list[str]:
    """Build, execute and (if fit) save ``file_name``; the problems that kept it from being saved."""
    notebook = build_notebooks.build_notebook(file_name)
    with tempfile.TemporaryDirectory(prefix="notebook-refresh-") as work:
        work_dir = Path(work)
        try:
            execute(notebook, work_dir)
        except Exception as exc:  # nbclient's CellExecutionError carries the cell and its traceback
            kernel_log = (work_dir / "kernel.log").read_text(errors="replace").strip()
            return [f"the run failed: {exc}"[:3000] + (f"\nthe kernel said: {kernel_log[-2000:]}" if kernel_log else "")]
        scrub(notebook, work_dir)
        problems = build_notebooks.output_problems(notebook, build_notebooks.machine_paths() + (work,))
    nbformat.validate(notebook)
    if problems:
        return problems
    path = build_notebooks.NOTEBOOK_DIR / file_name
    path.write_text(nbformat.writes(notebook) + "\n", encoding="utf-8")
    size = path.stat().st_size
    if size > build_notebooks.MAX_NOTEBOOK_BYTES:
        return [f"saved, but {size:,} bytes is more than {build_notebooks.MAX_NOTEBOOK_BYTES:,}"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", metavar="NOTEBOOK",
                        help=f"file names to refresh (default: all of {', '.join(build_notebooks.NOTEBOOKS)})")
    args = parser.parse_args(argv)
    names = [Path(name).name for name in args.notebooks] or list(build_notebooks.NOTEBOOKS)
    unknown = [name for name in names if name not in build_notebooks.NOTEBOOKS]
    if unknown:
        parser.error(f"unknown notebook(s) {', '.join(unknown)}; known: {', '.join(build_notebooks.NOTEBOOKS)}")
    failed = False
    for name in names:
        print(f"{name}: executing ...", flush=True)
        problems = refresh(name)
        for problem in problems:
            print(f"{name}: {problem}", file=sys.stderr)
        if problems:
            failed = True
        else:
            size = (build_notebooks.NOTEBOOK_DIR / name).stat().st_size
            print(f"{name}: saved with its outputs ({size / 1000:.0f} kB)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
