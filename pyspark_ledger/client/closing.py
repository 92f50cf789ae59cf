"""How the writers' ``with`` blocks close them: one rule for ``LedgerWriter`` and ``LogWriter``."""
from __future__ import annotations

import logging
from typing import Callable

from pyspark_ledger.errors import LedgerError


def close_leaving_block(close: Callable[[], None], block_failed: bool, log: logging.Logger, what: str) -> None:
    """Close on leaving a ``with`` block. A close error propagates after a block that succeeded; after one
    that raised, it is logged (as a warning naming ``what``) so the block's own exception is the one seen."""
    if not block_failed:
        close()
        return
    try:
        close()
    except LedgerError:
        log.warning("closing %s after an error failed", what, exc_info=True)
