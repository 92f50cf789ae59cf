"""A local pyspark-ledger cluster for notebooks, demos and tests (``ledger sandbox`` on the command line).

``Sandbox`` (``cluster.py``) runs the metadata service (embedded SQLite, or a
local ZooKeeper) and N real bookie processes on free 127.0.0.1 ports; the
other modules keep its layout (``layout.py``), its data-dir lock
(``lock.py``), its metadata service (``metadata_service.py``) and its port
checks (``ports.py``)::

    from pyspark_ledger.sandbox import Sandbox

    with Sandbox(bookies=3) as sb:
        print(sb.metadata_uri, sb.bookie_ids)
"""
from __future__ import annotations

from pyspark_ledger.sandbox.cluster import DEFAULT_BOOKIES, Sandbox

__all__ = ["DEFAULT_BOOKIES", "Sandbox"]
