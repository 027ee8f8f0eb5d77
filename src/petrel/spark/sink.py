"""The sink: ``df.write.format("petrel")`` and ``df.writeStream.format("petrel")``.

Options
    ``brokers``      broker URL, ``tcp://host:port`` or ``failover:(tcp://a:61616,tcp://b:61617)``
                     (default ``tcp://localhost:61616``)
    ``address``      where to send: ``queue://NAME``, ``topic://NAME`` or an address name; may be
                     left out when the rows carry an ``address`` column (the option wins)
    ``dupIdColumn``  a column holding each row's duplicate ID (the best choice: an ID from
                     upstream); rows where it is null, and all rows without it, get
                     ``<query id>:<batch id>:<partition>:<row>`` (streaming) or
                     ``<write id>:<partition>:<row>`` (batch)
    ``writeId``      batch writes: the ID of this write (default: a new one per write), so
                     running the same batch job again with the same ``writeId`` publishes nothing twice
    ``chunkSize``    messages per broker transaction (default 500)
    ``attempts``     tries per chunk when the connection fails (default 5)
    ``statsFile``    a file the driver appends one JSON line to per committed batch:
                     ``{"batch", "published", "duplicates", "chunks", "retries", "tasks"}``
    ``user``, ``password``  broker credentials

Columns (others are ignored): ``body`` binary or string (required); ``properties``
map<string,string>; ``priority`` int 0..9; ``durable`` boolean (default true); ``ttl`` ms;
``expiration`` epoch ms or timestamp; ``timestamp`` epoch ms or timestamp; ``delay`` ms;
``scheduled`` epoch ms or timestamp; ``address`` string.

Exactly once: a replayed micro-batch (a restart from the checkpoint, a retried task) gives
every row the same duplicate ID as before, and the broker drops what it already has
(publish.py). This holds while the rows of a batch come in the same order into the same
partitions (no ``repartition()``, no non-deterministic joins before the sink), and while
the address's duplicate-ID cache (``id_cache_size``, 20000 by default) holds more IDs than
one batch sends. A ``dupIdColumn`` lifts the ordering condition.

What the broker did comes back in the commit messages: each task's published and
dropped-as-duplicate counts; ``commit`` sums them, logs them (logger ``petrel.spark.sink``,
event ``spark.sink.commit``) and appends them to ``statsFile``. PySpark 4.3's Python data
source API has no custom metrics, so they cannot appear in the query progress itself.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from petrel.client import DUPLICATE_ID, Message
from petrel.spark.publish import Counts, Publisher

__all__ = ["BatchSink", "PublishCounts", "RowShape", "StreamSink", "sink_options"]

log = logging.getLogger("petrel.spark.sink")

DEFAULT_BROKERS = "tcp://localhost:61616"
DEFAULT_CHUNK = 500
_INTEGRAL = (IntegerType, LongType, ShortType, ByteType)
_TIMES = (TimestampType, TimestampNTZType)


@dataclass
class PublishCounts(WriterCommitMessage):
    """One task's commit message: what the broker did with its rows."""

    partition: int = 0
    published: int = 0
    duplicates: int = 0
    chunks: int = 0
    retries: int = 0


@dataclass(frozen=True)
class SinkOptions:
    brokers: str
    address: str | None
    dup_id_column: str | None
    chunk_size: int
    attempts: int
    stats_file: str | None
    write_id: str | None
    user: str | None
    password: str | None


def sink_options(options) -> SinkOptions:
    """The sink's options from the data source's (case-insensitive) option map, checked."""
    def get(name: str) -> str | None:
        value = options.get(name)
        return None if value is None or value == "" else str(value)

    def positive(name: str, default: int) -> int:
        raw = get(name)
        try:
            value = int(raw) if raw is not None else default
        except ValueError:
            raise ValueError(f"petrel sink: option {name} must be an integer, not {raw!r}") from None
        if value < 1:
            raise ValueError(f"petrel sink: option {name} must be at least 1, not {value}")
        return value

    return SinkOptions(
        brokers=get("brokers") or DEFAULT_BROKERS,
        address=get("address"),
        dup_id_column=get("dupIdColumn"),
        chunk_size=positive("chunkSize", DEFAULT_CHUNK),
        attempts=positive("attempts", 5),
        stats_file=get("statsFile"),
        write_id=get("writeId"),
        user=get("user"),
        password=get("password"),
    )


@dataclass(frozen=True)
class RowShape:
    """Where each message field sits in a row, decided once on the driver from the schema."""

    body: int
    body_is_text: bool
    properties: int = -1
    priority: int = -1
    durable: int = -1
    ttl: int = -1
    expiration: int = -1
    timestamp: int = -1
    delay: int = -1
    scheduled: int = -1
    address: int = -1
    dup_id: int = -1

    @classmethod
    def of(cls, schema: StructType, opts: SinkOptions) -> RowShape:
        fields = {f.name.lower(): (i, f.dataType) for i, f in enumerate(schema.fields)}

        def find(name: str, *types: type) -> int:
            hit = fields.get(name.lower())
            if hit is None:
                return -1
            index, dtype = hit
            if types and not isinstance(dtype, types):
                wanted = " or ".join(t.__name__.replace("Type", "").lower() for t in types)
                raise ValueError(f"petrel sink: column {name!r} must be {wanted}, not {dtype.simpleString()}")
            return index

        body = find("body", BinaryType, StringType)
        if body < 0:
            raise ValueError(f"petrel sink: the rows need a 'body' column (binary or string); "
                             f"they have {', '.join(schema.names) or 'no columns'}")
        props = find("properties", MapType)
        if props >= 0 and not isinstance(schema.fields[props].dataType.keyType, StringType):
            raise ValueError("petrel sink: 'properties' must be a map with string keys")
        address = find("address", StringType)
        if opts.address is None and address < 0:
            raise ValueError("petrel sink: say where to send: option 'address' (queue://NAME, topic://NAME "
                             "or an address) or an 'address' column")
        dup_id = -1
        if opts.dup_id_column is not None:
            dup_id = find(opts.dup_id_column)
            if dup_id < 0:
                raise ValueError(f"petrel sink: dupIdColumn {opts.dup_id_column!r} is not a column "
                                 f"({', '.join(schema.names)})")
        return cls(
            body=body,
            body_is_text=isinstance(schema.fields[body].dataType, StringType),
            properties=props,
            priority=find("priority", *_INTEGRAL),
            durable=find("durable", BooleanType),
            ttl=find("ttl", *_INTEGRAL),
            expiration=find("expiration", *_INTEGRAL, *_TIMES),
            timestamp=find("timestamp", *_INTEGRAL, *_TIMES),
            delay=find("delay", *_INTEGRAL),
            scheduled=find("scheduled", *_INTEGRAL, *_TIMES),
            address=-1 if opts.address is not None else address,
            dup_id=dup_id,
        )

    def message(self, row, default_dup_id: str, default_address: str | None) -> tuple[str, Message]:
        body = row[self.body]
        if body is None:
            body = b""
        elif self.body_is_text:
            body = body.encode()
        else:
            body = bytes(body)
        props = {}
        if self.properties >= 0 and row[self.properties]:
            props = {str(k): v if isinstance(v, (str, int, float, bool)) else str(v)
                     for k, v in row[self.properties].items() if v is not None}
        dup_id = row[self.dup_id] if self.dup_id >= 0 else None
        props[DUPLICATE_ID] = str(dup_id) if dup_id is not None else default_dup_id
        fields = {}
        if self.priority >= 0 and row[self.priority] is not None:
            fields["priority"] = int(row[self.priority])
        if self.durable >= 0 and row[self.durable] is not None:
            fields["durable"] = bool(row[self.durable])
        for name, index in (("expiration", self.expiration), ("timestamp", self.timestamp),
                            ("scheduled", self.scheduled)):
            if index >= 0 and row[index] is not None:
                fields[name] = _epoch_ms(row[index])
        if self.ttl >= 0 and row[self.ttl] is not None:
            fields["ttl"] = int(row[self.ttl])
        if self.delay >= 0 and row[self.delay] is not None:
            fields["delay"] = int(row[self.delay])
        address = default_address if self.address < 0 else row[self.address]
        if not address:
            raise ValueError(f"petrel sink: a row has no address (row for duplicate ID {props[DUPLICATE_ID]!r})")
        return address, Message(body, props, **fields)


def _epoch_ms(value) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # Spark hands TIMESTAMP values over in the session's local time
        return int(value.timestamp() * 1000)
    return int(value)


def _publish(rows: Iterator, shape: RowShape, opts: SinkOptions, prefix: str, partition: int) -> PublishCounts:
    """Publish a task's rows in chunks of ``chunk_size``; row ``i`` gets ``<prefix>:<i>``."""
    connect = {k: v for k, v in (("user", opts.user), ("password", opts.password)) if v is not None}
    with Publisher(opts.brokers, attempts=opts.attempts, **connect) as publisher:
        chunk: list = []
        for index, row in enumerate(rows):
            chunk.append(shape.message(row, f"{prefix}:{index}", opts.address))
            if len(chunk) >= opts.chunk_size:
                publisher.publish(chunk)
                chunk = []
        if chunk:
            publisher.publish(chunk)
        c = publisher.counts
    return PublishCounts(partition, c.published, c.duplicates, c.chunks, c.retries)


def _task() -> tuple[int, object]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # called outside a Spark task (tests)
        return 0, None
    return context.partitionId(), context


def _sum(messages) -> tuple[Counts, int]:
    total = Counts()
    tasks = 0
    for m in messages:
        if isinstance(m, PublishCounts):
            tasks += 1
            total.add(Counts(m.published, m.duplicates, m.chunks, m.retries))
    return total, tasks


def _report(opts: SinkOptions, batch: str | int, messages, *, aborted: bool = False) -> Counts:
    total, tasks = _sum(messages)
    if aborted:
        log.warning("petrel sink batch %s aborted: %d messages already published to %s (visible), "
                    "%d dropped as duplicates; a replay will not publish them again",
                    batch, total.published, opts.address or "(address column)", total.duplicates,
                    extra={"event": "spark.sink.abort"})
    else:
        log.info("petrel sink batch %s committed: %d published, %d dropped as duplicates "
                 "(%d transactions, %d retried) to %s", batch, total.published, total.duplicates,
                 total.chunks, total.retries, opts.address or "(address column)",
                 extra={"event": "spark.sink.commit"})
    if opts.stats_file:
        line = {"batch": batch, **asdict(total), "tasks": tasks, "aborted": aborted, "time": time.time()}
        with open(opts.stats_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    return total


class BatchSink(DataSourceWriter):
    """``df.write.format("petrel")``: one write ID per write (made here, on the driver, and
    pickled to every task with the writer), so a retried task's rows are dropped as duplicates."""

    def __init__(self, options, schema: StructType) -> None:
        self.opts = sink_options(options)
        self.shape = RowShape.of(schema, self.opts)
        self.write_id = self.opts.write_id or f"petrel-write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator) -> PublishCounts:
        partition, _ = _task()
        return _publish(iterator, self.shape, self.opts, f"{self.write_id}:{partition}", partition)

    def commit(self, messages: list) -> None:
        _report(self.opts, self.write_id, messages)

    def abort(self, messages: list) -> None:
        _report(self.opts, self.write_id, messages, aborted=True)


class StreamSink(DataSourceStreamWriter):
    """``df.writeStream.format("petrel")``: duplicate IDs from the query id (stable across
    restarts from the same checkpoint), the batch id (the same when a batch is replayed), the
    partition and the row's place in it."""

    def __init__(self, options, schema: StructType) -> None:
        self.opts = sink_options(options)
        self.shape = RowShape.of(schema, self.opts)

    def write(self, iterator: Iterator) -> PublishCounts:
        partition, context = _task()
        if context is None:
            raise RuntimeError("petrel sink: write() outside a Spark task")
        query = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            raise RuntimeError("petrel sink: no streaming query or batch id in the task context")
        return _publish(iterator, self.shape, self.opts, f"{query}:{batch}:{partition}", partition)

    def commit(self, messages: list, batchId: int) -> None:
        _report(self.opts, batchId, messages)

    def abort(self, messages: list, batchId: int) -> None:
        _report(self.opts, batchId, messages, aborted=True)

