"""``wait_until``: the bounded polling every test uses instead of sleeping and hoping."""
from __future__ import annotations

import time
from typing import Callable

import pytest


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "a condition",
               interval: float = 0.02) -> object:
    """Poll ``predicate`` until it returns something truthy (returned); fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
