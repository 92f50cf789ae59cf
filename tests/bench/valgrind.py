"""The mark for tests that count instructions under valgrind (bench/instructions.py, bench/client_instructions.py)."""
from __future__ import annotations

import shutil

import pytest

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None,
                                    reason="valgrind not installed (apt-get install valgrind; .ci/run installs it)")
