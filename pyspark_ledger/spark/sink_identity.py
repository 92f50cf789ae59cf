"""The writer id of a streaming write: who commits each micro-batch exactly once.

The log layer commits a batch once per (writer id, batch id): a batch id not
above the writer's last committed one is a replay and changes nothing. So the
id must stay the same when a query restarts from its checkpoint (Spark then
replays the batch it had not marked done) and must differ for a query with a
new checkpoint (whose batch ids start again at 0, and would otherwise all be
taken for replays):

- option ``writerId``, if given, is the id (the user keeps it per query);
- a checkpoint on the local file system (a path, or a ``file:`` URI) holds
  Spark's query id in its ``metadata`` file: the id is ``query-<that id>``. A
  checkpoint deleted and started again at the same path gets a new query id,
  hence a new writer;
- any other checkpoint (``hdfs://``, ``s3a://`` ...) is out of reach of the
  Python worker: the id is ``checkpoint-<sha256 of its location>``, so reusing
  a location for a new query needs a new ``writerId`` (said in the README).

The id is resolved by the driver when it commits a batch: Spark has written
the checkpoint's ``metadata`` file by then.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from urllib.parse import unquote, urlparse

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.spark.options import WriteOptions

QUERY_PREFIX = "query-"
CHECKPOINT_PREFIX = "checkpoint-"
SPARK_METADATA_FILE = "metadata"
_QUERY_ID = re.compile(r"[0-9A-Za-z-]{1,100}", re.ASCII)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:", re.ASCII)


def require_writer_identity(options: WriteOptions) -> None:
    """Refuse a streaming write that names neither a checkpoint location nor a writer id."""
    if options.writer_id is None and options.checkpoint_location is None:
        raise InvalidConfigurationError(
            "option checkpointLocation is required for a streaming write to format 'ledger' (it identifies "
            "the query, so that a micro-batch replayed after a restart is committed once): give "
            "writeStream.option('checkpointLocation', '/path/to/checkpoint'), or name the query's writer "
            "with option writerId")


def streaming_writer_id(options: WriteOptions) -> str:
    """The writer id of the query (see the module docstring)."""
    require_writer_identity(options)
    if options.writer_id is not None:
        return options.writer_id
    location = options.checkpoint_location
    path = local_path(location)
    if path is None:
        digest = hashlib.sha256(location.rstrip("/").encode("utf-8")).hexdigest()[:40]
        return CHECKPOINT_PREFIX + digest
    return QUERY_PREFIX + read_query_id(path, location)


def local_path(location: str) -> str | None:
    """The local path of a checkpoint location; None for a location on another file system."""
    if location.startswith("file:"):
        parsed = urlparse(location)
        if parsed.netloc not in ("", "localhost"):
            return None
        return unquote(parsed.path)
    if _SCHEME.match(location):
        return None
    return location


def read_query_id(path: str, location: str) -> str:
    """Spark's query id from ``<checkpoint>/metadata`` (``{"id": "<uuid>"}``)."""
    metadata = os.path.join(path, SPARK_METADATA_FILE)
    try:
        with open(metadata, encoding="utf-8") as handle:
            query_id = json.loads(handle.readline()).get("id")
    except (OSError, ValueError, AttributeError) as exc:
        raise InvalidConfigurationError(
            f"cannot read the query id from {metadata!r} (option checkpointLocation={location!r}): {exc}. "
            "The ledger sink needs it to commit each micro-batch once; if the checkpoint is not on this "
            "machine's file system, give the query a stable option writerId") from exc
    if not isinstance(query_id, str) or not _QUERY_ID.fullmatch(query_id):
        raise InvalidConfigurationError(
            f"{metadata!r} holds no Spark query id (found {query_id!r}): is option "
            f"checkpointLocation={location!r} a Spark checkpoint? Give option writerId instead")
    return query_id
