"""The one exception tree of pyspark-ledger.

Every error a user of the client, the bookie or the metadata store can see is
a ``LedgerError``. Transport and library errors (gRPC, kazoo, sqlite3, OS) are
translated once, at the boundary where they occur, with ``raise ... from exc``.

An *unknown* outcome (timeout, I/O error, corrupt data) is never turned into an
explicit negative such as "no such entry": recovery decides on those, and
confusing them is how ledgers get truncated.
"""
from __future__ import annotations


class LedgerError(Exception):
    """Base class of every error raised by pyspark-ledger."""


class InvalidConfigurationError(LedgerError, ValueError):
    """A parameter or option is invalid (e.g. E >= Qw >= Qa violated)."""


# --- metadata -----------------------------------------------------------------


class MetadataError(LedgerError):
    """The metadata store failed or is unreachable."""


class MetadataVersionConflictError(MetadataError):
    """A compare-and-set lost: the stored version is not the expected one."""


class MetadataExistsError(MetadataError):
    """Something was created that already exists."""


class NoSuchMetadataStoreError(MetadataError):
    """No metadata store at the URI (a missing SQLite file, a ZooKeeper chroot without the layout);
    opening for a read or a client never creates one: bookies and the sandbox do."""


class NoSuchLedgerError(LedgerError):
    """The ledger does not exist (in the metadata store, or on a bookie)."""


class NoSuchKeyError(MetadataError):
    """A metadata key (stream, log, cookie...) does not exist."""


# --- ledgers and entries --------------------------------------------------------


class LedgerFencedError(LedgerError):
    """The ledger was fenced by a recovering reader; the add may or may not be in it."""


class LedgerClosedError(LedgerError):
    """The ledger is closed (or being recovered) and takes no more entries."""


class LedgerFullError(LedgerClosedError):
    """The ledger reached the largest entry id (``pyspark_ledger.entry.MAX_ENTRY_ID``): write to a new ledger."""


class NotEnoughBookiesError(LedgerError):
    """Too few writable bookies to form or repair an ensemble."""


class UnauthorizedError(LedgerError):
    """Wrong password / master key for this ledger."""


class MetadataUnauthorizedError(MetadataError, UnauthorizedError):
    """The metadata store refused access: its nodes are protected (ZooKeeper digest ACLs) and the
    credentials given are missing or wrong."""


class RepairKeyError(LedgerError):
    """A repair key file or a sealed ledger secret that cannot be used (wrong key, tampered, malformed, unsafe)."""


class CorruptEntryError(LedgerError):
    """An entry failed its digest check or could not be decoded."""


class NoSuchEntryError(LedgerError):
    """The entry does not exist (an explicit answer, not an unknown)."""


class RecoveryError(LedgerError):
    """Recovery could not decide the ledger's end; the ledger was left unclosed."""


# --- bookies --------------------------------------------------------------------


class BookieError(LedgerError):
    """A bookie answered with an error status or could not be reached.

    ``status`` is the wire status name (e.g. ``"IO_ERROR"``) when the bookie
    answered, or ``"UNAVAILABLE"`` / ``"TIMEOUT"`` for transport failures.
    """

    def __init__(self, message: str, *, bookie_id: str = "", status: str = "") -> None:
        super().__init__(message)
        self.bookie_id = bookie_id
        self.status = status


class BookieUnavailableError(BookieError):
    """The bookie could not be reached or timed out (an unknown outcome)."""


class TooManyRequestsError(BookieError):
    """The bookie refused the request because too many are in flight."""


class ReadOnlyBookieError(BookieError):
    """The bookie is read-only (e.g. its disk is full) and takes no adds."""


class EntryTooLargeError(BookieError, InvalidConfigurationError):
    """An entry exceeds the bookie's maximum entry size."""


# --- bookie storage (server side) -----------------------------------------------


class StorageError(LedgerError):
    """The bookie's local storage failed (disk error, bad files)."""


class CorruptStorageError(StorageError):
    """Stored bytes are unreadable or fail their checksum."""


class JournalCorruptError(CorruptStorageError):
    """The journal has corruption before its tail; start-up stops."""


class DataDirectoryError(StorageError):
    """The data directory does not match the bookie's identity (cookie)."""


# --- logs and streams -------------------------------------------------------------


class DataLossError(LedgerError):
    """Entries a reader was due to read are no longer in the log (truncated, or the
    stream was recreated; the Spark option failOnDataLoss=false skips ahead instead),
    or no surviving replica of an entry can be read (re-replication)."""


class LedgerInUseError(LedgerError):
    """A ledger a stream's log refers to would be deleted: refused unless forced (``--force``), naming the
    stream, partition and range it would break."""
