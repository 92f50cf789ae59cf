"""What every log-layer operation works with: the metadata store, the replication client, the password.

``password_name`` is how an error names the password when it does not match
a stream's (``stream_password``): the StreamClient parameter by default, the
option ``password`` for the Spark data source.

``StreamClient`` builds one; the writer, reader, commit and retention modules
take it instead of three separate arguments.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from pyspark_ledger.metadata.store import MetadataStore

if TYPE_CHECKING:  # an annotation only: the metadata-only paths (planning, commits) need no gRPC client
    from pyspark_ledger.client.ledger_client import LedgerClient

DEFAULT_PASSWORD_NAME = "StreamClient's parameter password"


@dataclass(frozen=True)
class LogContext:
    """The store holding stream records, the client for ledgers, the ledgers' password, a wall clock."""

    store: MetadataStore
    client: LedgerClient
    password: bytes = field(default=b"", repr=False)
    #: Wall-clock milliseconds (commit and retention times); tests may pin it.
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    #: Where the password came from, as errors name it ("option password", ...).
    password_name: str = DEFAULT_PASSWORD_NAME
