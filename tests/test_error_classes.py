"""Every exception class in pyspark_ledger.errors is raised somewhere, and docs/errors.md says what each means."""
from __future__ import annotations

import ast
import inspect
import pathlib

import pyspark_ledger
from pyspark_ledger import errors

ROOT = pathlib.Path(pyspark_ledger.__file__).parent.parent
SOURCES = sorted((ROOT / "pyspark_ledger").rglob("*.py")) + sorted((ROOT / "bookie_server").rglob("*.py"))


def error_classes() -> list[str]:
    return [name for name, value in vars(errors).items()
            if inspect.isclass(value) and issubclass(value, errors.LedgerError)]


def constructed_names() -> set[str]:
    """Names called as functions (``SomeError(...)``, ``errors.SomeError(...)``) in the package and the bookie."""
    names = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def test_every_error_class_is_raised():
    """Built where it is raised, or raised through the status registry (``errors.error_for_status``)."""
    raised = constructed_names() | {entry.error.__name__ for entry in errors.STATUS_ERRORS.values() if entry.error}
    never = [name for name in error_classes() if name not in raised]
    assert never == [], f"classes never raised: {never}; raise them where they belong, or remove them"


def table_rows(section: str) -> list[list[str]]:
    """The cells of the table rows in one part of docs/errors.md (before or after '## Bookie statuses')."""
    before, _, after = (ROOT / "docs" / "errors.md").read_text().partition("## Bookie statuses")
    text = before if section == "classes" else after
    return [[cell.strip().strip("`") for cell in line.split("|")[1:-1]]
            for line in text.splitlines() if line.startswith("| `")]


def test_the_error_table_lists_every_class_once():
    assert sorted(row[0] for row in table_rows("classes")) == sorted(error_classes())


def test_the_status_table_says_what_the_registry_says():
    for row in table_rows("statuses"):
        status = errors.BookieStatus[row[0].split("`")[0].strip()]
        entry = errors.STATUS_ERRORS[status]
        assert row[1] == (entry.error.__name__ if entry.error else "none"), row
        assert row[2] == "–" if entry.error is None else row[2].startswith("yes") == entry.retriable, row
    assert len(table_rows("statuses")) == len(errors.BookieStatus)
