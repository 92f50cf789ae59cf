"""The one exception tree of pyspark-ledger.

Every error a user of the client, the bookie or the metadata store can see is
a ``LedgerError``. Transport and library errors (gRPC, kazoo, sqlite3, OS) are
translated once, at the boundary where they occur, with ``raise ... from exc``.

An *unknown* outcome (timeout, I/O error, corrupt data) is never turned into an
explicit negative such as "no such entry": recovery decides on those, and
confusing them is how ledgers get truncated.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark_ledger.status import BookieStatus


class LedgerError(Exception):
    """Base class of every error raised by pyspark-ledger."""


class InvalidConfigurationError(LedgerError, ValueError):
    """A setting is invalid: a ``ClientConfig`` field, a bookie flag, a Spark option, a CLI flag, a metadata
    URI, an environment variable, a file named by a setting, or a ledger's replication settings (ensemble
    size and quorums, E >= Qw >= Qa; digest type). The message names the setting."""


class InvalidArgumentError(LedgerError, ValueError):
    """A value passed to a call is invalid (an entry id or range out of bounds, a payload that is not bytes,
    a malformed name): the caller's mistake in this one call, not a setting. The message names the argument."""


class InvalidStateError(LedgerError):
    """The object a call is made on is in a state that does not allow it (a ledger OPEN where it must be
    CLOSED, a client or writer already closed)."""


class InternalError(LedgerError):
    """An invariant of pyspark-ledger itself broke: a bug, never the caller's doing. Please report it."""


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


class EntryTooLargeError(InvalidArgumentError):
    """An entry (or a single row of a Spark write) is larger than an entry may be (``ClientConfig.max_entry_bytes``,
    within the bookies' ``--max-entry-size``)."""


class CorruptEntryError(LedgerError):
    """An entry failed its digest check or could not be decoded."""


class NoSuchEntryError(LedgerError):
    """The entry does not exist (an explicit answer, not an unknown)."""


class RecoveryError(LedgerError):
    """Recovery could not decide the ledger's end; the ledger was left unclosed."""


# --- bookies --------------------------------------------------------------------


class BookieError(LedgerError):
    """A bookie answered with an error status or could not be reached.

    ``status`` (a ``BookieStatus``) is what the bookie answered (e.g. ``IO_ERROR``), or the transport
    condition in which no answer came (``UNAVAILABLE``, ``TIMEOUT``, ``CANCELLED``, ``CLOSED``,
    ``RPC_FAILED``); ``retriable`` says whether sending the request again may succeed (``STATUS_ERRORS``).
    """

    default_status = BookieStatus.RPC_FAILED

    def __init__(self, message: str, *, bookie_id: str = "", status: BookieStatus | None = None) -> None:
        super().__init__(message)
        self.bookie_id = bookie_id
        if status is None:
            status = self.default_status
        if isinstance(status, str):
            raise InvalidArgumentError(f"a BookieError's status is a BookieStatus member (BookieStatus.{status}), "
                                       f"not the string {status!r}")
        self.status = BookieStatus(status)

    @property
    def retriable(self) -> bool:
        return STATUS_ERRORS[self.status].retriable


class BookieUnavailableError(BookieError):
    """No answer came: the bookie could not be reached, timed out, or the client closed (an unknown outcome)."""

    default_status = BookieStatus.UNAVAILABLE


class AddStreamEndedError(BookieUnavailableError):
    """The bookie ended an add stream cleanly (its idle timeout, or a drain) with adds on it unanswered: it may not
    have read them (docs/protocol.md W2)."""


class TooManyRequestsError(BookieError):
    """The bookie shed the request (too many in flight): the same bookie may take it after a back-off."""

    default_status = BookieStatus.TOO_MANY_REQUESTS


class ReadOnlyBookieError(BookieError):
    """The bookie is read-only (e.g. its disk is full) and takes no adds; it still serves reads."""

    default_status = BookieStatus.READ_ONLY




class BookieProcessError(LedgerError):
    """A bookie process this library runs (the sandbox, ``pyspark_ledger.testing``) did not start (it exited,
    was not ready in time, is already running, or its port is taken) or did not stop in time; ``bookie_id``
    names it."""

    def __init__(self, message: str, *, bookie_id: str = "") -> None:
        super().__init__(message)
        self.bookie_id = bookie_id


# --- bookie storage (server side) -----------------------------------------------


class ClusterError(LedgerError):
    """The test cluster in network namespaces (``pyspark_ledger.testing.cluster``) could not be made, started or
    removed: an ``ip`` command failed, or a process there did not start in time (the message names the step)."""


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


# --- the registry: which exception each bookie status raises ----------------------


@dataclass(frozen=True)
class StatusError:
    """What a ``BookieStatus`` means as an error: the exception it raises (None for OK) and whether it is
    ``retriable``: sending the same request again (to this bookie after a back-off, or to another bookie
    holding a replica) may succeed. A status that is not retriable is a final answer to the request."""

    error: type[LedgerError] | None
    retriable: bool


#: every BookieStatus, wire statuses and transport conditions alike (a test checks that none is missing)
STATUS_ERRORS: dict[BookieStatus, StatusError] = {
    BookieStatus.OK: StatusError(None, False),
    BookieStatus.STATUS_UNSPECIFIED: StatusError(BookieError, True),  # an answer this client cannot read
    BookieStatus.NO_SUCH_LEDGER: StatusError(NoSuchLedgerError, False),  # explicit: this bookie has none
    BookieStatus.NO_SUCH_ENTRY: StatusError(NoSuchEntryError, False),
    BookieStatus.FENCED: StatusError(LedgerFencedError, False),
    BookieStatus.UNAUTHORIZED: StatusError(UnauthorizedError, False),
    BookieStatus.READ_ONLY: StatusError(ReadOnlyBookieError, True),  # another bookie takes the add
    BookieStatus.TOO_MANY_REQUESTS: StatusError(TooManyRequestsError, True),  # the same bookie, later
    BookieStatus.BAD_REQUEST: StatusError(BookieError, False),  # malformed or over a limit: never taken
    BookieStatus.IO_ERROR: StatusError(BookieError, True),  # another replica may serve it
    BookieStatus.UNAVAILABLE: StatusError(BookieUnavailableError, True),
    BookieStatus.TIMEOUT: StatusError(BookieUnavailableError, True),
    BookieStatus.CANCELLED: StatusError(BookieUnavailableError, False),  # the client itself gave up
    BookieStatus.CLOSED: StatusError(BookieUnavailableError, False),
    BookieStatus.RPC_FAILED: StatusError(BookieError, True),
}


def error_for_status(status: BookieStatus, message: str, *, bookie_id: str = "") -> LedgerError:
    """The exception for a request that ended with ``status`` (not OK), of the class ``STATUS_ERRORS`` names.

    A ``BookieError`` carries ``bookie_id`` and ``status``; the others (fenced, unauthorized, no such
    ledger or entry) are about the ledger, not the bookie, and carry the message alone."""
    error = STATUS_ERRORS[status].error
    if error is None:
        raise InternalError(f"status {status.name} is not an error")
    if issubclass(error, BookieError):
        return error(message, bookie_id=bookie_id, status=status)
    return error(message)
