"""How every benchmark script hands over its result: one JSON document on stdout and, with ``--out``, in a file
(the runner, ``python -m bench``, reads the file)."""
from __future__ import annotations

import json
from pathlib import Path


def emit(result: dict, out: Path | None) -> int:
    """Print ``result`` as indented JSON and write it to ``out`` too (its directory made if missing); 0, the
    script's exit status."""
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return 0
