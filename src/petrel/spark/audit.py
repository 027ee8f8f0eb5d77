"""The audit stream: produced and consumed events, as Parquet files under one directory.

Reconciliation (reconcile.py) compares what producers sent with what consumers got and what
the brokers' journals still hold, message by message, keyed on the duplicate ID
(``_AMQ_DUPL_ID``): a message's stable identity across brokers, migrations and resends.

Two ways to write events, into the same directory and schema (``AUDIT_SCHEMA``):

* ``AuditWriter`` — for applications and tools, no Spark needed (pyarrow): call
  ``produced(queue, message)`` after a confirmed send (of a message that has a duplicate ID:
  ``stamp(message)`` gives it one before sending) and ``consumed(queue, message)``
  after an acknowledged receive. Events are buffered and written as one Parquet file per
  ``flush`` (every ``flush_every`` events, and on ``close``), each file put in place by a
  rename, so a reader never sees half a file.
* ``consumed_events(df)`` — for Spark pipelines: the rows of ``format("petrel")`` (the
  queue source) as consumed events; write them with the file sink and a checkpoint, and
  the audit is exactly once::

      rows = spark.readStream.format("petrel").option("brokers", url).option("queues", "orders").load()
      (consumed_events(rows).writeStream.format("parquet").option("path", "/audit/consumed")
       .option("checkpointLocation", "/audit/_chk").trigger(availableNow=True).start())

``read_audit(spark, paths)`` reads them all back (keep a streaming query's output in a directory of
its own: it is read through its ``_spark_metadata`` log).

Columns: ``event`` (produced or consumed), ``queue``, ``dup_id``, ``node`` (the broker's node
ID, when known), ``seq`` and ``message_id`` (the queue's, when consumed), ``timestamp`` (the
message's, epoch ms), ``at`` (when the event happened, epoch ms), ``source`` (who wrote it).
"""

from __future__ import annotations

import itertools
import os
import socket
import time
import uuid
from pathlib import Path

__all__ = ["AUDIT_COLUMNS", "AUDIT_SCHEMA", "AuditWriter", "consumed_events", "read_audit"]

AUDIT_COLUMNS = (("event", "string"), ("queue", "string"), ("dup_id", "string"), ("node", "string"),
                 ("seq", "long"), ("message_id", "long"), ("timestamp", "long"), ("at", "long"),
                 ("source", "string"))
#: The Spark DDL of an audit file.
AUDIT_SCHEMA = ", ".join(f"{name} {dtype}" for name, dtype in AUDIT_COLUMNS)
_DUPLICATE_ID = "_AMQ_DUPL_ID"


def _arrow_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64()}
    return pa.schema([(name, types[dtype]) for name, dtype in AUDIT_COLUMNS])


def _queue_name(destination: str) -> str:
    """``queue://orders`` -> ``orders`` (a plain name stays as it is)."""
    return destination.split("://", 1)[1] if "://" in destination else destination


class AuditWriter:
    """Buffers audit events and writes them to ``path`` as Parquet files (see the module)."""

    def __init__(self, path: str | os.PathLike, *, source: str | None = None, flush_every: int = 10_000) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.source = source or f"{socket.gethostname()}:{os.getpid()}"
        self.flush_every = max(1, flush_every)
        self._rows: dict[str, list] = {name: [] for name, _ in AUDIT_COLUMNS}
        self._files = itertools.count()
        self._id = uuid.uuid4().hex[:12]

    def __len__(self) -> int:
        return len(self._rows["event"])

    @staticmethod
    def stamp(message) -> str:
        """The message's duplicate ID, set to a new unique one when it has none."""
        dup = message.properties.get(_DUPLICATE_ID)
        if dup is None:
            dup = message.properties[_DUPLICATE_ID] = uuid.uuid4().hex
        return str(dup)

    def produced(self, queue: str, message=None, *, dup_id: str | None = None, node: str | None = None) -> None:
        """A confirmed send of ``message`` (or of the message with ``dup_id``) to ``queue``. The
        message must carry its duplicate ID already (``stamp`` it before sending: the client
        puts an ID of its own on the wire, which the message object never sees)."""
        if dup_id is None:
            dup = message.properties.get(_DUPLICATE_ID) if message is not None else None
            if dup is None:
                raise ValueError("a produced event needs the message's duplicate ID: call stamp(message) "
                                 "(or set Message(duplicate_id=...)) before sending it")
            dup_id = str(dup)
        timestamp = getattr(message, "timestamp", None) or None
        self._add("produced", queue, dup_id, node, None, None, timestamp)

    def consumed(self, queue: str, message=None, *, dup_id: str | None = None, node: str | None = None,
                 seq: int | None = None, message_id: int | None = None) -> None:
        """An acknowledged receive of ``message`` (a received client message) from ``queue``."""
        if message is not None:
            dup = message.properties.get(_DUPLICATE_ID)
            dup_id = dup_id if dup is None else str(dup)
            seq = seq if seq is not None else getattr(message, "seq", None)
            message_id = message_id if message_id is not None else getattr(message, "message_id", None)
        if dup_id is None:
            raise ValueError("a consumed event needs the message's duplicate ID (_AMQ_DUPL_ID)")
        timestamp = getattr(message, "timestamp", None) or None
        self._add("consumed", queue, dup_id, node, seq, message_id, timestamp)

    def _add(self, event: str, queue: str, dup_id: str, node, seq, message_id, timestamp) -> None:
        values = (event, _queue_name(queue), str(dup_id), node, seq, message_id, timestamp,
                  int(time.time() * 1000), self.source)
        for (name, _), value in zip(AUDIT_COLUMNS, values):
            self._rows[name].append(value)
        if len(self) >= self.flush_every:
            self.flush()

    def flush(self) -> Path | None:
        """Write the buffered events as one Parquet file; its path (None when nothing was buffered)."""
        if not len(self):
            return None
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(self._rows, schema=_arrow_schema())
        name = f"audit-{self._id}-{next(self._files):06d}.parquet"
        tmp = self.path / f".{name}.tmp"  # Spark skips names starting with a dot
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / name)
        self._rows = {name: [] for name, _ in AUDIT_COLUMNS}
        return self.path / name

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> AuditWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def consumed_events(rows):
    """The queue source's rows (``format("petrel")``) as consumed audit events."""
    from pyspark.sql import functions as F

    return rows.select(F.lit("consumed").alias("event"), F.col("queue"), F.col("dup_id"), F.col("node"),
                       F.col("seq"), F.col("message_id"), F.col("timestamp"),
                       (F.unix_timestamp(F.current_timestamp()) * 1000).cast("long").alias("at"),
                       F.lit("spark").alias("source"))


def read_audit(spark, path: str):
    """Every audit event under ``path`` (comma-separated directories): the Parquet files of an
    ``AuditWriter`` (subdirectories included), or a Spark file sink's output (a directory
    with ``_spark_metadata``: read through its log, so a failed batch's files never count)."""
    frames = []
    for part in (p.strip() for p in path.split(",")):
        if not part:
            continue
        reader = spark.read.schema(AUDIT_SCHEMA)
        if (Path(part) / "_spark_metadata").is_dir():
            frames.append(reader.parquet(part))
        else:
            frames.append(reader.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.parquet")
                          .parquet(part))
    if not frames:
        raise ValueError("no audit path given")
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
