"""Small helpers the stream tests share: a closed ledger of a stream's partition, and whether a ledger still exists."""
from __future__ import annotations

from pyspark_ledger.errors import NoSuchLedgerError


def closed_ledger(streams, stream, partition, *entries):
    """Creates a ledger for ``stream``'s ``partition``, appends ``entries``, closes it and returns its id."""
    ledger = streams.create_ledger(stream, partition)
    for data in entries:
        ledger.append(data)
    ledger.close()
    return ledger.ledger_id


def exists(streams, ledger_id):
    """Whether the metadata store still holds ``ledger_id``."""
    try:
        streams.client.ledger_metadata(ledger_id)
    except NoSuchLedgerError:
        return False
    return True
