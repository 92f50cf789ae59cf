"""Builds the notebooks of this directory from their cell sources in ``notebooks/cells/``, and checks them.

The cells live in plain Python modules (one or more per notebook, each a list
``CELLS`` of ``("markdown" | "code", text)`` pairs, concatenated in order) because those are easy to review and
diff; ``build_notebook`` turns them into notebooks with nbformat, with stable
cell ids. The committed ``.ipynb`` files are those notebooks *executed*, with
the outputs and pictures of one real run, top to bottom, so that a reader on
the web sees results without running anything. ``refresh.py`` writes them::

    python notebooks/refresh.py                    # build, execute and save every notebook
    python notebooks/build_notebooks.py --check    # exit 1 if a committed notebook is stale or unfit

A committed notebook is *stale* when its cells, stripped of their outputs,
differ from what ``cells/`` builds; it is *unfit* (``output_problems``) when a
code cell was not executed in one run from the top, or an output is an error
or a warning (a stderr stream), or it shows a path of the machine that ran it,
or the file is too big. ``tests/notebooks`` runs both checks and executes
every notebook again.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import nbformat

NOTEBOOK_DIR = Path(__file__).resolve().parent
CELLS_DIR = NOTEBOOK_DIR / "cells"
#: notebook file name -> the modules of ``CELLS_DIR`` holding its cells, in order (a long notebook's cells
#: are kept in several modules, each under ~400 lines)
NOTEBOOKS = {
    "01_quickstart.ipynb": ("quickstart",),
    "02_streaming.ipynb": ("streaming",),
    "03_failure_and_recovery.ipynb": ("failure_and_recovery", "failure_and_recovery_writer"),
}
KINDS = ("markdown", "code")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3", "file_extension": ".py",
                 "mimetype": "text/x-python"}
#: A committed notebook stays well under 1 MB (its pictures are PNGs of a few tens of kB).
MAX_NOTEBOOK_BYTES = 600_000
#: Placeholder of the temp dir a notebook ran in, in saved outputs.
TMP_PLACEHOLDER = "/tmp"


def load_cells(module_name: str) -> list[tuple[str, str]]:
    """The ``CELLS`` list of ``cells/<module_name>.py``, checked."""
    module = _import_cells_module(module_name)
    cells = getattr(module, "CELLS", None)
    if not isinstance(cells, list) or not cells:
        raise SystemExit(f"{CELLS_DIR / module_name}.py must define CELLS, a non-empty list of (kind, text)")
    for index, cell in enumerate(cells):
        if not (isinstance(cell, tuple) and len(cell) == 2 and cell[0] in KINDS and isinstance(cell[1], str)):
            raise SystemExit(f"{module_name}.CELLS[{index}] must be a (kind, text) pair with kind in {KINDS}, "
                             f"got {cell!r:.80}")
    return cells


def build_notebook(file_name: str) -> nbformat.NotebookNode:
    """The notebook ``file_name`` from its cells: no outputs, stable ids, the python3 kernel."""
    stem = file_name.split(".")[0]
    cells = []
    modules = NOTEBOOKS[file_name]
    for index, (kind, text) in enumerate(cell for module in modules for cell in load_cells(module)):
        source = _dedent(text)
        cell_id = f"{stem}-{index:02d}"
        if kind == "markdown":
            cells.append(nbformat.v4.new_markdown_cell(source, id=cell_id))
        else:
            cells.append(nbformat.v4.new_code_cell(source, id=cell_id))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO)}
    nbformat.validate(notebook)
    return notebook


def render(file_name: str) -> str:
    """The exact text of ``file_name`` built from its cells, without outputs."""
    return nbformat.writes(build_notebook(file_name)) + "\n"


def strip_outputs(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``notebook`` without outputs, execution counts or execution metadata."""
    stripped = copy.deepcopy(notebook)
    for cell in stripped.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
    return stripped


def is_stale(notebook: nbformat.NotebookNode, file_name: str) -> bool:
    """True if ``notebook``'s cells (outputs aside) differ from what ``cells/`` builds for ``file_name``."""
    return nbformat.writes(strip_outputs(notebook)) + "\n" != render(file_name)


def stale_notebooks() -> list[str]:
    """Committed notebooks whose cells (outputs aside) differ from what ``cells/`` builds, or missing."""
    stale = []
    for file_name in NOTEBOOKS:
        try:
            committed = nbformat.read(NOTEBOOK_DIR / file_name, as_version=4)
        except (OSError, ValueError):
            stale.append(file_name)
            continue
        if is_stale(committed, file_name):
            stale.append(file_name)
    return stale


def output_problems(notebook: nbformat.NotebookNode, machine_paths: tuple[str, ...] = ()) -> list[str]:
    """What keeps an executed notebook from being shown as it is ([] if nothing):

    a code cell not executed, execution counts other than 1, 2, 3 ... in order (one run, top to
    bottom), an error output, a stderr stream (a warning or log line in the reader's face), or
    one of ``machine_paths`` (the checkout, the home dir, the temp dir of the run) in an output."""
    problems = []
    code = [(index, cell) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    counts = [cell.execution_count for _, cell in code]
    if counts != list(range(1, len(code) + 1)):
        problems.append(f"execution counts {counts} are not 1..{len(code)}: execute every cell once, in order")
    for index, cell in code:
        for output in cell.outputs:
            if output.output_type == "error":
                problems.append(f"cell {index} raised {output.ename}: {output.evalue}"[:300])
            elif output.output_type == "stream" and output.name == "stderr":
                problems.append(f"cell {index} wrote to stderr: {output.text.strip()}"[:300])
            text = _output_text(output)
            for path in machine_paths:
                if path and path in text:
                    problems.append(f"cell {index} shows the path {path} of the machine that ran it")
    return problems


def committed_problems(file_name: str) -> list[str]:
    """``output_problems`` of the committed ``file_name``, plus its size."""
    path = NOTEBOOK_DIR / file_name
    problems = output_problems(nbformat.read(path, as_version=4), machine_paths())
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        problems.append(f"{size:,} bytes, more than {MAX_NOTEBOOK_BYTES:,}: make its pictures smaller")
    return problems


def machine_paths() -> tuple[str, ...]:
    """Paths of this machine that must not appear in committed outputs."""
    return tuple(sorted({str(NOTEBOOK_DIR.parent), os.path.expanduser("~")} - {"/", "~"}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a committed notebook is stale or unfit (the default action)")
    parser.parse_args(argv)
    failed = False
    for file_name in stale_notebooks():
        failed = True
        print(f"{file_name} differs from notebooks/cells/: run python notebooks/refresh.py", file=sys.stderr)
    for file_name in NOTEBOOKS:
        if (NOTEBOOK_DIR / file_name).exists():
            for problem in committed_problems(file_name):
                failed = True
                print(f"{file_name}: {problem}", file=sys.stderr)
    return 1 if failed else 0


def _output_text(output: nbformat.NotebookNode) -> str:
    """The text an output shows (streams, text/plain, text/html), for path checks."""
    if output.output_type == "stream":
        return output.text
    data = output.get("data", {})
    return "".join(str(data.get(mime, "")) for mime in ("text/plain", "text/html", "text/markdown"))


def _import_cells_module(module_name: str) -> ModuleType:
    path = CELLS_DIR / f"{module_name}.py"
    spec = importlib.util.spec_from_file_location(f"_notebook_cells_{module_name}", path)
    if spec is None or not path.exists():
        raise SystemExit(f"no cells module {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dedent(text: str) -> str:
    """Cell text as written in the cells modules: leading/trailing blank lines dropped, common indent removed."""
    return textwrap.dedent(text).strip("\n")


if __name__ == "__main__":
    sys.exit(main())
