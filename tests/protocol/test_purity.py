"""The protocol core stays pure: no transport, store, thread, clock or file modules."""
from __future__ import annotations

import ast
import pathlib

import pyspark_ledger.protocol as protocol

FORBIDDEN = {"grpc", "kazoo", "threading", "time", "os", "socket", "sqlite3", "asyncio", "concurrent",
             "subprocess", "datetime", "pathlib", "io", "secrets", "uuid"}


def imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_protocol_modules_import_nothing_that_does_io():
    paths = sorted(pathlib.Path(protocol.__file__).parent.glob("*.py"))
    assert len(paths) >= 9
    for path in paths:
        assert not imported_modules(path) & FORBIDDEN, path.name


def test_randomness_is_only_ever_injected():
    for path in pathlib.Path(protocol.__file__).parent.glob("*.py"):
        source = path.read_text()
        assert "random.Random(" not in source and "random.random(" not in source, path.name
