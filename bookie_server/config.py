"""The bookie server's configuration: one dataclass and the command line that fills it.

``parse_args(argv)`` turns ``bookie-server`` flags into a ``ServerConfig``; an
invalid flag makes argparse print a message naming the flag and exit with
status 2. ``ServerConfig.storage_config()`` maps the journal and checkpoint
knobs onto the storage engine's ``StorageConfig``.
"""
from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pyspark_ledger.arg_types import number
from pyspark_ledger.metadata.bookie_location import DEFAULT_RACK, DEFAULT_ZONE, name_problem

MiB = 1024 * 1024
GiB = 1024 * MiB
DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_ENTRY_SIZE = 5 * MiB
DEFAULT_MAX_INFLIGHT_ADDS = 10_000
DEFAULT_METRICS_PORT = 0
DEFAULT_SHUTDOWN_GRACE_S = 10.0
DEFAULT_GRPC_WORKERS = 16          # threads beyond the per-kind caps: health, Info
DEFAULT_MAX_BATCH_BYTES = 8 * MiB  # the client's batches are 4 MiB (ClientConfig.max_batch_bytes)
DEFAULT_MAX_BATCH_ADDS = 65_536    # a 4 MiB batch of the smallest entries holds about 50,000 adds
DEFAULT_MAX_STREAM_INFLIGHT_BYTES = 64 * MiB
DEFAULT_MAX_INFLIGHT_BYTES = 512 * MiB
DEFAULT_MAX_ADD_STREAMS = 256
DEFAULT_MAX_LONG_POLLS = 128
DEFAULT_MAX_CONCURRENT_READS = 64
DEFAULT_MAX_READ_CONNECTIONS = 128  # framed read connections (docs/protocol.md W12), a thread each
MAX_READ_CONNECTIONS = 4096
DEFAULT_ADD_STREAM_IDLE_TIMEOUT_S = 300.0
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    port: int
    metadata_uri: str
    journal_dir: Path | None = None
    host: str = DEFAULT_HOST
    advertised_address: str = ""             # what clients dial (registered); "" = host
    advertised_port: int | None = None       # the port clients dial (registered); None = port
    bookie_id: str = ""                      # "" = advertised address:port
    metrics_port: int = DEFAULT_METRICS_PORT  # 0 = a free port, -1 = no metrics endpoint
    add_port: int = -1                        # the framed port (docs/protocol.md W11, W12); 0 = a free port, -1 = off
    max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE
    max_inflight_adds: int = DEFAULT_MAX_INFLIGHT_ADDS
    journal_max_wait_ms: float = 0.0
    journal_max_batch_records: int = 10_000
    journal_max_batch_bytes: int = 32 * MiB
    journal_file_size: int = 512 * MiB
    entry_log_size: int = 1024 * MiB
    checkpoint_interval_s: float = 30.0
    skip_journal_corruption: bool = False
    journal_write_data: bool = False
    journal_inline_max_bytes: int = 64 * 1024
    journal_preallocate_bytes: int = 4 * MiB
    entry_log_preallocate_bytes: int = 16 * MiB
    entry_log_direct_io: bool = False
    disk_usage_threshold: float = 0.95
    disk_usage_lwm: float = 0.90
    disk_check_interval_s: float = 10.0
    disk_reserve_bytes: int = 16 * MiB
    gc_interval_s: float = 300.0
    gc_compaction_threshold: float = 0.2
    gc_overreplicated_wait_s: float = 86_400.0
    exit_with_parent: bool = False
    allow_new_data_dir: bool = False
    adopt_metadata_store: str | None = None
    verify_new_ledgers: bool = True
    add_answer_runs: bool = True  # OK add answers as runs to clients that ask (docs/protocol.md W9)
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    grpc_workers: int = DEFAULT_GRPC_WORKERS
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_batch_adds: int = DEFAULT_MAX_BATCH_ADDS
    max_stream_inflight_bytes: int = DEFAULT_MAX_STREAM_INFLIGHT_BYTES
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    max_add_streams: int = DEFAULT_MAX_ADD_STREAMS
    max_long_polls: int = DEFAULT_MAX_LONG_POLLS
    max_concurrent_reads: int = DEFAULT_MAX_CONCURRENT_READS
    max_read_connections: int = DEFAULT_MAX_READ_CONNECTIONS
    add_stream_idle_timeout_s: float = DEFAULT_ADD_STREAM_IDLE_TIMEOUT_S
    tls_cert: str | None = None       # with tls_key: serve TLS only
    tls_key: str | None = None
    tls_client_ca: str | None = None  # require client certificates signed by this CA (mutual TLS)
    admin_identities: tuple[str, ...] = ()  # client certificate names served without ledger keys
    zone: str = DEFAULT_ZONE                # failure domain published for zone-aware placement
    rack: str = DEFAULT_RACK
    log_level: str = "INFO"

    @property
    def tls(self):
        """The bookie's ``ServerTls``, or None when it serves plaintext."""
        from pyspark_ledger.security.tls import ServerTls

        if self.tls_cert is None:
            return None
        return ServerTls(self.tls_cert, self.tls_key, self.tls_client_ca)

    @property
    def grpc_threads(self) -> int:
        """gRPC handler threads (grown on demand) and the most calls served at once: every capped kind
        at its cap plus ``grpc_workers`` for health and Info, so those always find a thread."""
        return self.max_add_streams + self.max_long_polls + self.max_concurrent_reads + self.grpc_workers

    @property
    def advertised_host(self) -> str:
        """The address clients dial, registered in the metadata store: ``--advertised-address``, else ``--host``."""
        return self.advertised_address or self.host

    @property
    def dial_port(self) -> int:
        """The port clients dial, registered in the metadata store: ``--advertised-port``, else ``--port``
        (they differ when something in between forwards, e.g. a proxy or a container's port mapping)."""
        return self.advertised_port or self.port

    @property
    def effective_bookie_id(self) -> str:
        return self.bookie_id or f"{self.advertised_host}:{self.dial_port}"

    def storage_config(self):
        """The storage engine's configuration for these flags."""
        from bookie_server.storage import StorageConfig  # late: keeps --help fast

        return StorageConfig(
            data_dir=self.data_dir,
            journal_dir=self.journal_dir,
            journal_max_wait_ms=self.journal_max_wait_ms,
            journal_max_batch_records=self.journal_max_batch_records,
            journal_max_batch_bytes=self.journal_max_batch_bytes,
            journal_file_size=self.journal_file_size,
            entry_log_size=self.entry_log_size,
            checkpoint_interval_s=self.checkpoint_interval_s,
            skip_journal_corruption=self.skip_journal_corruption,
            journal_write_data=self.journal_write_data,
            journal_inline_max_bytes=self.journal_inline_max_bytes,
            journal_preallocate_bytes=self.journal_preallocate_bytes,
            entry_log_preallocate_bytes=self.entry_log_preallocate_bytes,
            entry_log_direct_io=self.entry_log_direct_io,
        )


_non_negative_int = number(int, lambda value: value >= 0, "expected a whole number >= 0")
_fraction = number(float, lambda value: 0 < value <= 1, "must be a fraction in (0, 1], e.g. 0.95")
_compaction_threshold = number(float, lambda value: 0 <= value < 1,
                               "must be a fraction in [0, 1), e.g. 0.2 (0 = no compaction)")
_positive_int = number(int, lambda value: value >= 1, "must be a positive integer")
_port = number(int, lambda value: 1 <= value <= 65535, "must be a TCP port in 1..65535")
_metrics_port = number(int, lambda value: -1 <= value <= 65535, "must be -1 (off), 0 (any free port) or a port")
_add_port = _metrics_port
_read_connections = number(int, lambda value: 1 <= value <= MAX_READ_CONNECTIONS,
                           f"must be a whole number from 1 to {MAX_READ_CONNECTIONS}")
_non_negative_float = number(float, lambda value: value >= 0, "must be a number >= 0")
_preallocate_bytes = number(int, lambda value: 0 <= value <= GiB, "must be a whole number from 0 to 1073741824 (1 GiB)")


def _bookie_id(text: str) -> str:
    if not text or "/" in text or text.strip() != text:
        raise argparse.ArgumentTypeError(
            f"must be a non-empty id without '/' or surrounding spaces, got {text!r}")
    return text


def _identity(text: str) -> str:
    if not text or text.strip() != text or len(text) > 1024 or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"must be a certificate name (printable, no surrounding spaces, at most 1024 characters), got {text!r}")
    return text


def _location_name(what: str):
    def parse(text: str) -> str:
        problem = name_problem(text, what)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return text
    return parse


def _instance_id(text: str) -> str:
    from pyspark_ledger.errors import InvalidConfigurationError
    from pyspark_ledger.metadata.instance import check_instance_id

    try:
        return check_instance_id(text, "the value")
    except InvalidConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


class _DefaultsFormatter(argparse.HelpFormatter):
    """Appends '(default: X)' to every optional flag whose help does not state its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required or "default" in text or action.default is argparse.SUPPRESS:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            return text + " (default: off)"
        return text + " (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bookie-server",
        description="Run one pyspark-ledger bookie: a gRPC storage server for ledger entries.",
        formatter_class=_DefaultsFormatter,
    )
    add = parser.add_argument
    add("--data-dir", required=True, type=Path, help="directory for entry logs, index and cookie")
    add("--port", required=True, type=_port, help="gRPC port to listen on")
    add("--metadata", required=True, dest="metadata_uri",
        help="metadata store URI: sqlite:///abs/path.db or zk://host:port/chroot")
    add("--journal-dir", type=Path, default=None, help="journal directory (default: DATA_DIR/journal)")
    add("--host", default=DEFAULT_HOST, help="address to listen on (gRPC and metrics)")
    add("--advertised-address", default="", metavar="ADDR",
        help="the address clients on other hosts dial, registered in the metadata store and part of the default "
             "bookie id; needed when --host is a wildcard (0.0.0.0, ::) (default: HOST)")
    add("--advertised-port", type=_port, default=None, metavar="PORT",
        help="the port clients dial, registered in the metadata store and part of the default bookie id, when "
             "something in between forwards another port to --port (a proxy, a container port mapping) "
             "(default: PORT)")
    add("--bookie-id", type=_bookie_id, default=None, help="bookie id (default: ADVERTISED_ADDRESS:ADVERTISED_PORT)")
    add("--metrics-port", type=_metrics_port, default=DEFAULT_METRICS_PORT,
        help="Prometheus /metrics HTTP port on HOST; 0 = any free port (printed at start), -1 = off")
    add("--add-port", type=_add_port, default=-1,
        help="also take adds on this port as framed TCP streams (docs/protocol.md W11), the add path without gRPC; "
             "registered for clients to find; 0 = any free port, -1 = off; plaintext only, so not with --tls-cert")
    add("--max-entry-size", type=_positive_int, default=DEFAULT_MAX_ENTRY_SIZE,
        help="largest accepted entry body in bytes")
    add("--max-inflight-adds", type=_positive_int, default=DEFAULT_MAX_INFLIGHT_ADDS,
        help="adds not yet durable per add stream; more are answered TOO_MANY_REQUESTS")
    add("--journal-max-wait-ms", type=_non_negative_float, default=0.0,
        help="group commit: longest wait for more records after the first")
    add("--journal-max-batch-records", type=_positive_int, default=10_000,
        help="group commit: most records per fsync")
    add("--journal-max-batch-bytes", type=_positive_int, default=32 * MiB,
        help="group commit: most bytes per fsync")
    add("--journal-file-size", type=_positive_int, default=512 * MiB, help="rotate journal files at this size")
    add("--entry-log-size", type=_positive_int, default=1024 * MiB, help="rotate entry logs at this size")
    add("--checkpoint-interval", dest="checkpoint_interval_s", type=_non_negative_float, default=30.0,
        help="seconds between background checkpoints; 0 disables them")
    add("--skip-journal-corruption", action="store_true",
        help="start even past corruption in the middle of the journal (entries there are lost)")
    add("--journal-write-data", action="store_true",
        help="also copy every entry body into the journal (one fsync per group commit, twice the bytes "
             "written); default: journal a reference, the body is written once to the entry log")
    add("--journal-inline-max-bytes", type=_non_negative_int, default=64 * 1024,
        help="without --journal-write-data, still copy bodies up to this size into the journal: a group "
             "commit of small entries then needs one fsync, not two (0: references only)")
    add("--journal-preallocate-bytes", type=_non_negative_int, default=4 * MiB,
        help="extend the journal file with zeros this many bytes ahead of its records (written and fsync'd by "
             "a thread of their own), so a group commit's fdatasync changes no file metadata (0: plain appends)")
    add("--entry-log-preallocate-bytes", type=_preallocate_bytes, default=16 * MiB,
        help="allocate the current entry log's blocks this many bytes ahead of its records, its size unchanged, "
             "so appends need no block allocation as they go; given back when a log is sealed (0: plain appends)")
    add("--entry-log-direct-io", action="store_true",
        help="write entry logs around the page cache (O_DIRECT, whole blocks from 16 buffers of 256 KiB, each block "
             "once), where the file system allows: less CPU per MiB beside Spark, less throughput where the disk "
             "is the limit; default: through the page cache")
    add("--disk-usage-threshold", type=_fraction, default=0.95,
        help="turn read-only (refuse adds, register as read-only) when a disk of the bookie is fuller than this")
    add("--disk-usage-lwm", type=_fraction, default=0.90,
        help="turn writable again once the fullest disk is below this fraction")
    add("--disk-check-interval", dest="disk_check_interval_s", type=_non_negative_float, default=10.0,
        help="seconds between disk usage checks; 0 disables them")
    add("--disk-reserve", dest="disk_reserve_bytes", type=_non_negative_int, default=16 * MiB,
        help="bytes kept allocated in DATA_DIR/RESERVED_SPACE and released when the disk is too full to replay "
             "the journal at start: the bookie then starts read-only and serves reads (0: no reserve)")
    add("--gc-interval", dest="gc_interval_s", type=_non_negative_float, default=300.0,
        help="seconds between garbage collection passes (ledgers deleted from the metadata store lose their "
             "data here after two passes); 0 turns garbage collection off")
    add("--gc-compaction-threshold", type=_compaction_threshold, default=0.2,
        help="compact a sealed entry log (copy its live entries, delete it) once live data is below this "
             "fraction of it; 0 = never compact")
    add("--gc-overreplicated-wait", dest="gc_overreplicated_wait_s", type=_non_negative_float, default=86_400.0,
        help="delete the copies of a closed ledger that no longer names this bookie (re-replicated elsewhere "
             "while it was gone) once it has been so, and not written here, for this many seconds (default a "
             "day); 0 keeps them")
    add("--exit-with-parent", action="store_true",
        help="stop gracefully once the process that started this bookie has ended (sandboxes use it)")
    add("--allow-new-data-dir", action="store_true",
        help="accept an empty data dir for a bookie id that had data before (its entries are lost); never lets "
             "a bookie start against another metadata store than the one its data belongs to")
    add("--adopt-metadata-store", type=_instance_id, default=None, metavar="INSTANCE_ID",
        help="move this bookie's data to the metadata store with this instance id (printed when the bookie "
             "refuses a store): only for a store that holds this bookie's ledgers, as its garbage collector "
             "deletes those the store does not list (default: none)")
    add("--no-verify-new-ledgers", dest="verify_new_ledgers", action="store_false",
        help="create state for a ledger never seen here on any first add or fence, without checking that the "
             "metadata store has the ledger and its master key matches (lets anyone squat ledger ids)")
    add("--no-add-answer-runs", dest="add_answer_runs", action="store_false",
        help="answer every add with its own AddResult even to clients that ask for runs of acknowledged "
             "entry ids (docs/protocol.md W9): what a bookie of an earlier version does")
    add("--shutdown-grace", dest="shutdown_grace_s", type=_non_negative_float, default=DEFAULT_SHUTDOWN_GRACE_S,
        help="seconds to let in-flight requests finish after SIGTERM/SIGINT")
    add("--grpc-workers", type=_positive_int, default=DEFAULT_GRPC_WORKERS,
        help="gRPC handler threads beyond the caps below, kept for health checks and Info (the pool grows "
             "on demand up to the sum; past it, calls are refused at once with RESOURCE_EXHAUSTED)")
    add("--max-add-streams", type=_positive_int, default=DEFAULT_MAX_ADD_STREAMS,
        help="open add streams (each holds two threads); more are refused at once with RESOURCE_EXHAUSTED")
    add("--max-long-polls", type=_positive_int, default=DEFAULT_MAX_LONG_POLLS,
        help="ReadLac long polls waiting at once; more are answered TOO_MANY_REQUESTS at once")
    add("--max-concurrent-reads", type=_positive_int, default=DEFAULT_MAX_CONCURRENT_READS,
        help="Read, ReadLac and WriteLac calls served at once; more are answered TOO_MANY_REQUESTS at once")
    add("--max-read-connections", type=_read_connections, default=DEFAULT_MAX_READ_CONNECTIONS,
        help="read connections open at once on the framed port (--add-port; docs/protocol.md W12), each holding "
             "a thread; more are refused at once with TOO_MANY_REQUESTS (their reads then take the gRPC port)")
    add("--add-stream-idle-timeout", dest="add_stream_idle_timeout_s", type=_non_negative_float,
        default=DEFAULT_ADD_STREAM_IDLE_TIMEOUT_S,
        help="end an add stream that sent nothing and has nothing in flight for this many seconds (the "
             "client opens a new one on its next add); 0 = never")
    add("--max-batch-bytes", type=_positive_int, default=DEFAULT_MAX_BATCH_BYTES,
        help="largest AddBatch message (with --max-entry-size: the gRPC receive limit is the larger plus "
             "1 MiB); keep it at or above the clients' max_batch_bytes")
    add("--max-batch-adds", type=_positive_int, default=DEFAULT_MAX_BATCH_ADDS,
        help="adds in one AddBatch; a larger batch ends the stream with INVALID_ARGUMENT")
    add("--max-stream-inflight-bytes", type=_positive_int, default=DEFAULT_MAX_STREAM_INFLIGHT_BYTES,
        help="bytes of adds not yet durable per add stream (bodies plus ~640 bytes per add); past it the "
             "bookie reads no more of that stream until answers free room (back-pressure)")
    add("--max-inflight-bytes", type=_positive_int, default=DEFAULT_MAX_INFLIGHT_BYTES,
        help="bytes of adds not yet durable in the whole bookie (as above); past it, adds are answered "
             "TOO_MANY_REQUESTS at once")
    add("--tls-cert", default=None, metavar="FILE",
        help="serve TLS only, with this PEM certificate (chain) whose names cover the address clients dial; "
             "needs --tls-key (default: plaintext)")
    add("--tls-key", default=None, metavar="FILE", help="the PEM private key of --tls-cert (mode 0600)")
    add("--tls-client-ca", default=None, metavar="FILE",
        help="require every caller to show a certificate signed by this PEM CA (mutual TLS); the names in it "
             "are the caller's identity (default: no client certificates)")
    add("--admin-identity", dest="admin_identities", action="append", type=_identity, default=None,
        metavar="NAME",
        help="a client certificate name (CN or DNS/URI SAN) whose holder may read, read LAC, write LAC and fence "
             "any ledger this bookie stores without its master key (repair and inspection tools); repeatable; "
             "needs --tls-client-ca (default: none)")
    add("--zone", type=_location_name("zone"), default=DEFAULT_ZONE, metavar="NAME",
        help="the failure domain (data centre, availability zone) this bookie is in, published with its "
             "registration; clients spread every write quorum over as many zones as they can "
             "(docs/protocol.md P1); 1-64 letters, digits, '.', '_', '-'")
    add("--rack", type=_location_name("rack"), default=DEFAULT_RACK, metavar="NAME",
        help="the rack within --zone, published likewise; placement spreads over racks second; "
             "1-64 letters, digits, '.', '_', '-'")
    add("--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="logging level")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> ServerConfig:
    """Parse flags into a ServerConfig; exits with status 2 and a message on bad flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.metadata_uri.strip():
        parser.error("argument --metadata: must not be empty")
    if args.advertised_address and (args.advertised_address.strip() != args.advertised_address
                                    or any(ch in args.advertised_address for ch in "/ []") or
                                    len(args.advertised_address) > 253 or _is_wildcard(args.advertised_address)):
        parser.error(f"argument --advertised-address: {args.advertised_address!r} must be a host name or address "
                     "that clients can dial (no wildcard, spaces, '/' or brackets; at most 253 characters)")
    if _is_wildcard(args.host) and not args.advertised_address:
        parser.error(f"argument --host: {args.host!r} listens on every address of this host, but clients need one "
                     "to dial: give --advertised-address ADDR (the address other hosts reach this bookie at)")
    if args.disk_usage_lwm > args.disk_usage_threshold:
        parser.error(f"argument --disk-usage-lwm: {args.disk_usage_lwm} must not exceed --disk-usage-threshold "
                     f"{args.disk_usage_threshold}")
    if args.journal_dir is not None and args.journal_dir.resolve() == args.data_dir.resolve():
        parser.error("argument --journal-dir: must differ from --data-dir (omit it to use DATA_DIR/journal)")
    if args.max_inflight_bytes < args.max_entry_size + 1024:
        parser.error(f"argument --max-inflight-bytes: {args.max_inflight_bytes} leaves no room for one entry of "
                     f"--max-entry-size {args.max_entry_size} (and its bookkeeping)")
    if args.max_inflight_bytes < args.max_stream_inflight_bytes:
        parser.error(f"argument --max-inflight-bytes: {args.max_inflight_bytes} must not be below "
                     f"--max-stream-inflight-bytes {args.max_stream_inflight_bytes}")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("argument --tls-cert/--tls-key: give both (the certificate and its private key) or neither")
    if args.tls_client_ca is not None and args.tls_cert is None:
        parser.error("argument --tls-client-ca: needs --tls-cert and --tls-key (client certificates are "
                     "checked only over TLS)")
    if args.add_port > 0 and args.add_port in (args.port, args.metrics_port):
        parser.error(f"argument --add-port: {args.add_port} is already --port or --metrics-port: pick another")
    if args.admin_identities and args.tls_client_ca is None:
        parser.error("argument --admin-identity: needs --tls-client-ca (and --tls-cert, --tls-key): an identity "
                     "is the name in a client certificate the bookie verified, which only mutual TLS gives")
    fields = vars(args)
    fields["admin_identities"] = tuple(dict.fromkeys(args.admin_identities or ()))
    fields["bookie_id"] = fields["bookie_id"] or ""
    return ServerConfig(**fields)


def _is_wildcard(host: str) -> bool:
    return host.strip() in ("", "0.0.0.0", "::", "[::]", "*")


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
