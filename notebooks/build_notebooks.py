"""Writes the notebooks of this directory from their cell sources in ``notebooks/cells/``.

The cells live in plain Python modules (one per notebook, each a list of
``("markdown" | "code", text)`` pairs) because those are easy to review and
diff; this script turns them into ``.ipynb`` files with nbformat, without any
output or execution count, and with stable cell ids, so the committed files
change only when their cells do::

    python notebooks/build_notebooks.py            # (re)write every notebook
    python notebooks/build_notebooks.py --check    # exit 1 if a notebook differs from its cells

``tests/notebooks`` runs the ``--check`` comparison and executes every notebook.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import nbformat

NOTEBOOK_DIR = Path(__file__).resolve().parent
CELLS_DIR = NOTEBOOK_DIR / "cells"
#: notebook file name -> module of ``CELLS_DIR`` holding its cells
NOTEBOOKS = {
    "01_quickstart.ipynb": "quickstart",
    "02_streaming.ipynb": "streaming",
    "03_failure_and_recovery.ipynb": "failure_and_recovery",
}
KINDS = ("markdown", "code")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3", "file_extension": ".py",
                 "mimetype": "text/x-python"}


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
    for index, (kind, text) in enumerate(load_cells(NOTEBOOKS[file_name])):
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
    """The exact text of ``file_name`` as committed."""
    return nbformat.writes(build_notebook(file_name)) + "\n"


def stale_notebooks() -> list[str]:
    """Notebooks whose committed text differs from what their cells build (missing ones included)."""
    stale = []
    for file_name in NOTEBOOKS:
        path = NOTEBOOK_DIR / file_name
        if not path.exists() or path.read_text(encoding="utf-8") != render(file_name):
            stale.append(file_name)
    return stale


def write_all() -> list[Path]:
    written = []
    for file_name in NOTEBOOKS:
        path = NOTEBOOK_DIR / file_name
        path.write_text(render(file_name), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a committed notebook differs from its cells")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_notebooks()
        for file_name in stale:
            print(f"{file_name} is out of date: run python notebooks/build_notebooks.py", file=sys.stderr)
        return 1 if stale else 0
    for path in write_all():
        print(f"wrote {path}")
    return 0


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
