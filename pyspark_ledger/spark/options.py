"""The options of the Spark ``ledger`` data source, parsed and validated once.

Spark hands a data source its options as strings with lower-cased names;
``parse_read_options`` / ``parse_write_options`` turn them into frozen
dataclasses, or raise ``InvalidConfigurationError`` naming the option, the bad
value and what is accepted (an unknown name gets the closest known one).

==================== ======== ======== ========= ========= =========================
option               batch    stream   batch     stream    default
                     read     read     write     write
==================== ======== ======== ========= ========= =========================
metadataServiceUri   required required required  required  (sqlite:///... or zk://...)
stream               required required required  required  (or ``load(name)`` / ``save(name)``)
password             yes      yes      yes       yes       "" (empty)
startingOffsets      yes      yes                          earliest
endingOffsets        yes                                   latest
failOnDataLoss       yes      yes                          true
includeMetadata      yes      yes                          false
maxEntriesPerTrigger          yes                          none (all available)
maxBytesPerTrigger            yes                          none; accepts 1048576, 512k, 64m, 1g
maxPartitionBytes    yes                                   128m: entry bytes per input partition, 1m-64g
partitions                             yes       yes       the input's partition count
ensembleSize                           yes       yes       3
writeQuorum                            yes       yes       3
ackQuorum                              yes       yes       2
digest                                 yes       yes       crc32c (or hmac-sha256)
rowsPerEntry                           yes       yes       10000
compression                            yes       yes       none (or lz4, zstd)
minAckQuorumZones                      yes       yes       1 (no demand); 1 to 16
writerId                                         yes       from checkpointLocation
tlsCa                yes      yes      yes       yes       $LEDGER_TLS_CA on each process
tlsCert              yes      yes      yes       yes       $LEDGER_TLS_CERT on each process
tlsKey               yes      yes      yes       yes       $LEDGER_TLS_KEY on each process
checkpointLocation   ignored  ignored  ignored   yes       (Spark's own option)
==================== ======== ======== ========= ========= =========================

The quorum defaults apply one by one and are never adjusted: ``ensembleSize=1``
alone is refused (writeQuorum would still be 3) with a message saying so.
``partitions``, ``ensembleSize``, ``writeQuorum``, ``ackQuorum`` and ``digest``
only matter when the write creates the stream. Spark's own ``path`` (from
``load(name)`` / ``save(name)``) names the stream; ``queryName`` is ignored.

A ``sqlite:///`` metadataServiceUri with a Spark master that runs executors on other hosts is refused here,
on the driver (``driver_master``), unless option ``sqliteSharedFilesystem=true`` (every mode; default false;
only with a sqlite:/// URI) says the file is at the same path on every executor host.

``minAckQuorumZones`` (the client's ``min_ack_quorum_zones``, docs/protocol.md P2, P3) makes the write's
ledgers refuse any ensemble or replacement where some ack quorum could lie in fewer zones than that. It is
checked on the driver at planning against the ack quorum (at most ackQuorum, or the existing stream's) and
against the zones of the bookies registered then (NotEnoughBookiesError naming the zones); the tasks' clients
then place every ledger by it.

A streaming write commits each micro-batch exactly once per *writer id*: the
id of the query (``pyspark_ledger.spark.sink_identity``) derived from
``checkpointLocation``, so that a query restarted from its checkpoint is the
same writer (its replayed batches change nothing) and a query with a new
checkpoint is a new one. ``writerId`` names the writer explicitly instead (1-200
printable characters; give each query its own, and keep it across restarts).
A streaming write needs one of the two; other modes ignore ``checkpointLocation``.

``tlsCa`` (the CA that signed the bookies' certificates), ``tlsCert`` and ``tlsKey`` (a client certificate
and key, for bookies that require one) connect to the bookies with TLS. Given any of them, they are the
whole TLS setting of the query (``ReadOptions.tls`` / ``WriteOptions.tls``, a ``ClientTls``), and their
files are read on the driver at planning: a missing, unreadable or wrong file fails there, naming the
option. The paths must be readable at the same place on every executor. Without them, every process
takes ``LEDGER_TLS_*`` from its own environment (``spark.executorEnv.LEDGER_TLS_CA`` ...).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pyspark_ledger.entry import DIGEST_CRC32C
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.metadata.uri import ACCEPTED_FORMS
from pyspark_ledger.spark.driver_master import SHARED_OPTION, check_metadata_reachable
from pyspark_ledger.security.tls import ClientTls
from pyspark_ledger.spark.offsets import OffsetSpec, parse_ending_offsets, parse_starting_offsets
from pyspark_ledger.spark.option_values import (_ack_zones, _bool, _compression, _digest, _location, _metadata_uri,
                                                _partition_bytes, _partitions, _positive_int, _size, _stream, _text,
                                                _writer_id)

BATCH_READ, STREAM_READ, BATCH_WRITE, STREAM_WRITE = ("batch read", "streaming read", "batch write",
                                                      "streaming write")
READS = frozenset({BATCH_READ, STREAM_READ})
WRITES = frozenset({BATCH_WRITE, STREAM_WRITE})
ALL_MODES = READS | WRITES
DEFAULT_ENSEMBLE_SIZE, DEFAULT_WRITE_QUORUM, DEFAULT_ACK_QUORUM = 3, 3, 2
DEFAULT_ROWS_PER_ENTRY = 10_000
SPARK_PATH = "path"
IGNORED = frozenset({"queryname"})


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Options of a batch (``streaming=False``) or streaming read."""

    metadata_service_uri: str
    stream: str
    streaming: bool
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec | None  # None for a streaming read
    fail_on_data_loss: bool = True
    include_metadata: bool = False
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    max_partition_bytes: int | None = None  # None: batch_reader.SPLIT_BYTES
    password: str = field(default="", repr=False)
    tls: ClientTls | None = None  # the tlsCa/tlsCert/tlsKey options; None: each process's LEDGER_TLS_*

    @property
    def password_bytes(self) -> bytes:
        return self.password.encode("utf-8")


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Options of a batch or streaming write; the layout ones apply when the stream is created."""

    metadata_service_uri: str
    stream: str
    streaming: bool
    partitions: int | None = None  # None: as many as the written DataFrame has
    ensemble_size: int = DEFAULT_ENSEMBLE_SIZE
    write_quorum: int = DEFAULT_WRITE_QUORUM
    ack_quorum: int = DEFAULT_ACK_QUORUM
    digest: str = DIGEST_CRC32C
    rows_per_entry: int = DEFAULT_ROWS_PER_ENTRY
    compression: str = "none"  # of each entry's Arrow buffers: one of COMPRESSIONS
    password: str = field(default="", repr=False)
    writer_id: str | None = None  # streaming: the writerId option, if given
    checkpoint_location: str | None = None  # streaming: Spark's checkpointLocation, if given
    tls: ClientTls | None = None  # the tlsCa/tlsCert/tlsKey options; None: each process's LEDGER_TLS_*
    min_ack_quorum_zones: int = 1  # the minAckQuorumZones option: zones every ack quorum must span

    @property
    def password_bytes(self) -> bytes:
        return self.password.encode("utf-8")


@dataclass(frozen=True, slots=True)
class _Option:
    name: str
    modes: frozenset[str]
    parse: Callable[[str, str], Any]
    hint: str = ""  # said when the option is used where it does not apply


_OPTIONS = {option.name.lower(): option for option in (
    _Option("metadataServiceUri", ALL_MODES, _metadata_uri),
    _Option("stream", ALL_MODES, _stream),
    _Option("password", ALL_MODES, _text),
    _Option("startingOffsets", READS, _text, "a write always appends at the end of the stream"),
    _Option("endingOffsets", frozenset({BATCH_READ}), _text,
            "a streaming query runs until stopped; use trigger(availableNow=True) to stop "
            "once the data available at its start is read"),
    _Option("failOnDataLoss", READS, _bool),
    _Option("includeMetadata", READS, _bool),
    _Option("maxEntriesPerTrigger", frozenset({STREAM_READ}), _positive_int,
            "a batch read reads everything between startingOffsets and endingOffsets"),
    _Option("maxBytesPerTrigger", frozenset({STREAM_READ}), _size,
            "a batch read reads everything between startingOffsets and endingOffsets"),
    _Option("maxPartitionBytes", frozenset({BATCH_READ}), _partition_bytes,
            "a streaming read plans each micro-batch's entries by maxEntriesPerTrigger and maxBytesPerTrigger"),
    _Option("partitions", WRITES, _partitions, "a reader sees the partitions the stream has"),
    _Option("ensembleSize", WRITES, _positive_int, "replication is chosen when a stream is written"),
    _Option("writeQuorum", WRITES, _positive_int, "replication is chosen when a stream is written"),
    _Option("ackQuorum", WRITES, _positive_int, "replication is chosen when a stream is written"),
    _Option("digest", WRITES, _digest, "a reader uses the digest each ledger was written with"),
    _Option("rowsPerEntry", WRITES, _positive_int, "a reader gets the entries as written"),
    _Option("compression", WRITES, _compression, "a reader decompresses whatever each entry used"),
    _Option("minAckQuorumZones", WRITES, _ack_zones, "bookies are placed when a stream is written"),
    _Option("writerId", frozenset({STREAM_WRITE}), _writer_id,
            "a batch write is committed once, under an id of its own"),
    _Option("checkpointLocation", ALL_MODES, _location),
    _Option("tlsCa", ALL_MODES, _location),
    _Option("tlsCert", ALL_MODES, _location),
    _Option("tlsKey", ALL_MODES, _location),
    _Option(SHARED_OPTION, ALL_MODES, _bool),
)}
KNOWN_OPTIONS = tuple(option.name for option in _OPTIONS.values())


# --- the two entry points -----------------------------------------------------------


def parse_read_options(options: Mapping[str, Any], *, streaming: bool = False) -> ReadOptions:
    """Validate the options of ``spark.read`` (or ``readStream`` when ``streaming``)."""
    values = _collect(options, STREAM_READ if streaming else BATCH_READ)
    ending = None if streaming else parse_ending_offsets(values.get("endingoffsets"))
    return ReadOptions(
        metadata_service_uri=values["metadataserviceuri"], stream=values["stream"],
        streaming=streaming,
        starting_offsets=parse_starting_offsets(values.get("startingoffsets"), streaming=streaming),
        ending_offsets=ending,
        fail_on_data_loss=values.get("failondataloss", True),
        include_metadata=values.get("includemetadata", False),
        max_entries_per_trigger=values.get("maxentriespertrigger"),
        max_bytes_per_trigger=values.get("maxbytespertrigger"),
        max_partition_bytes=values.get("maxpartitionbytes"),
        password=values.get("password", ""), tls=_tls(values))


def parse_write_options(options: Mapping[str, Any], *, streaming: bool = False) -> WriteOptions:
    """Validate the options of ``df.write`` (or ``writeStream`` when ``streaming``)."""
    values = _collect(options, STREAM_WRITE if streaming else BATCH_WRITE)
    ensemble_size, write_quorum, ack_quorum = _quorums(values)
    return WriteOptions(
        metadata_service_uri=values["metadataserviceuri"], stream=values["stream"],
        streaming=streaming, partitions=values.get("partitions"),
        ensemble_size=ensemble_size, write_quorum=write_quorum, ack_quorum=ack_quorum,
        digest=values.get("digest", DIGEST_CRC32C),
        rows_per_entry=values.get("rowsperentry", DEFAULT_ROWS_PER_ENTRY),
        compression=values.get("compression", "none"),
        password=values.get("password", ""), writer_id=values.get("writerid"),
        checkpoint_location=values.get("checkpointlocation") if streaming else None, tls=_tls(values),
        min_ack_quorum_zones=values.get("minackquorumzones", 1))


# --- steps ----------------------------------------------------------------------------


def _collect(options: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """Lower-cased, checked, parsed values of the options given (defaults not filled in)."""
    raw = _lower_case(options)
    _take_path(raw)
    unknown = sorted(key for key in raw if key not in _OPTIONS and key not in IGNORED)
    if unknown:
        raise _unknown(unknown[0])
    for key in sorted(raw):
        if key in _OPTIONS and mode not in _OPTIONS[key].modes:
            raise _not_for_mode(_OPTIONS[key], mode)
    for required in ("metadataserviceuri", "stream"):
        if required not in raw:
            raise _missing(_OPTIONS[required].name, mode)
    values = {key: _OPTIONS[key].parse(_OPTIONS[key].name, value) for key, value in raw.items() if key in _OPTIONS}
    shared = values.get(SHARED_OPTION.lower())
    if shared is not None and not values["metadataserviceuri"].startswith("sqlite:"):
        raise InvalidConfigurationError(f"option {SHARED_OPTION} applies only to a sqlite:/// metadataServiceUri; "
                                        "remove it")
    check_metadata_reachable(values["metadataserviceuri"], bool(shared))
    return values


def _lower_case(options: Mapping[str, Any]) -> dict[str, str]:
    lowered: dict[str, str] = {}
    for key, value in options.items():
        name = str(key).strip().lower()
        if value is None:
            continue
        if name in lowered:
            raise InvalidConfigurationError(
                f"option {key!r} is given twice (option names ignore case): keep one")
        lowered[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return lowered


def _take_path(raw: dict[str, str]) -> None:
    """``load(name)`` / ``save(name)`` pass the stream name as Spark's ``path`` option."""
    path = raw.pop(SPARK_PATH, None)
    if path is None:
        return
    stream = raw.setdefault("stream", path)
    if stream != path:
        raise InvalidConfigurationError(
            f"option stream={stream!r} and the path {path!r} given to load()/save() name "
            "different streams: give the stream name once")


def _unknown(key: str) -> InvalidConfigurationError:
    """Names the option but not its value: a misspelt password must not reach the logs."""
    close = difflib.get_close_matches(key, list(_OPTIONS), n=1, cutoff=0.6)
    suggestion = f"did you mean {_OPTIONS[close[0]].name}? " if close else ""
    return InvalidConfigurationError(
        f"unknown option {key} for format 'ledger': {suggestion}"
        f"known options are {', '.join(KNOWN_OPTIONS)}")


def _not_for_mode(option: _Option, mode: str) -> InvalidConfigurationError:
    modes = " and ".join(sorted(option.modes))
    reason = f": {option.hint}" if option.hint else ""
    return InvalidConfigurationError(
        f"option {option.name} does not apply to a {mode} (only to a {modes}){reason}; remove it")


def _missing(name: str, mode: str) -> InvalidConfigurationError:
    examples = {"metadataServiceUri": f"one of {ACCEPTED_FORMS}",
                "stream": "the stream name, e.g. .option('stream', 'orders') or load('orders')"}
    return InvalidConfigurationError(f"option {name} is required for a {mode}: give {examples[name]}")


def _tls(values: Mapping[str, Any]) -> ClientTls | None:
    """The TLS options as a ClientTls whose files were read and checked (errors name the option); None if
    none is given."""
    ca, cert, key = values.get("tlsca"), values.get("tlscert"), values.get("tlskey")
    if ca is None and cert is None and key is None:
        return None
    tls = ClientTls(ca, cert, key, names=("tlsCa", "tlsCert", "tlsKey"))
    tls.channel_credentials()  # reads every file now, on the driver
    return tls


def _quorums(values: Mapping[str, Any]) -> tuple[int, int, int]:
    given = {"ensembleSize": values.get("ensemblesize"), "writeQuorum": values.get("writequorum"),
             "ackQuorum": values.get("ackquorum")}
    defaults = {"ensembleSize": DEFAULT_ENSEMBLE_SIZE, "writeQuorum": DEFAULT_WRITE_QUORUM,
                "ackQuorum": DEFAULT_ACK_QUORUM}
    chosen = {name: defaults[name] if value is None else value for name, value in given.items()}
    size, write, ack = chosen.values()
    if size >= write >= ack:
        return size, write, ack
    described = ", ".join(f"{name}={chosen[name]}" + (" (default)" if given[name] is None else "")
                          for name in chosen)
    raise InvalidConfigurationError(
        f"options {described} violate ensembleSize >= writeQuorum >= ackQuorum: set all three, "
        "e.g. ensembleSize=3, writeQuorum=3, ackQuorum=2 (or 1, 1, 1 for a single bookie)")
