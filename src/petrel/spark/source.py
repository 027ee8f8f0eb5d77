"""The source: ``spark.readStream.format("petrel")`` (and ``spark.read.format("petrel")``).

Reads queues exactly once, with replayable offsets: every message of a queue has a sequence
number per node that only grows; an offset is ``{"<node id>/<queue>": next seq}``; a batch is
the sequence range between two offsets, read without consuming anything (``browse_range``),
so a batch run again after a crash reads exactly the same messages. A durable named cursor
per queue (the ``subscription``) keeps the broker from removing what the query may still
need: it is created where the query starts and moved on as batches are committed.

Options
    ``brokers``              ``tcp://host:port``, several (``tcp://a:61616,tcp://b:61616``) or
                             a failover URL (default ``tcp://localhost:61616``); in a cluster
                             every node's queues are read from that node (its topology is followed)
    ``queues``               comma-separated queue names or Artemis wildcards (``orders.*``,
                             ``orders.#``), matched on every node (required)
    ``startingOffsets``      where a new query starts: ``acked`` (default: the subscription
                             cursor's position; a new cursor starts at the earliest message),
                             ``earliest``, ``latest``, or JSON ``{"<node id>/<queue>": seq}``
                             (or ``{"<queue>": seq}`` for every node; -2 earliest, -1 latest;
                             queues not named start at the earliest). A query restarted from
                             its checkpoint goes on from the checkpoint instead. A queue that
                             appears later (a wildcard, a new node) is read from its cursor's
                             position, or its earliest message.
    ``endingOffsets``        batch reads only: ``latest`` (default) or JSON like the above
    ``maxMessagesPerBatch``  at most this many sequence numbers per micro-batch, split fairly
                             across the queues, counted per queue from the first that holds a
                             message (default: everything available)
    ``messagesPerPartition`` sequence numbers per Spark task (default 10000)
    ``subscription``         the cursor's name (default ``spark``; give every query reading
                             the same queue its own)
    ``failOnDataLoss``       ``true`` (default): a batch whose messages the broker has removed
                             (a cursor passed them, e.g. another query with the same
                             subscription, or the queue was deleted) fails, naming the range;
                             ``false``: the removed messages are skipped and logged
    ``reconnectTimeout``     seconds to keep trying a broker that cannot be reached (default 60)
    ``user``, ``password``   broker credentials

Schema: ``node string, queue string, seq long, message_id long, dup_id string, timestamp long,
priority int, properties map<string,string>, body binary``; ``timestamp`` is the broker's
epoch milliseconds (``timestamp_millis(timestamp)`` makes a Spark timestamp);
``CAST(body AS STRING)`` decodes a UTF-8 body. A message's identity is (node, queue, seq):
``message_id`` changes once for a message that was paged; a message that moved to another node
(scale-down, drain) has a new one there and its earlier ones in ``properties['_PETREL_ORIGIN']``,
and is read at one of them only (copies.py). Numbers absent from a range (taken
by ordinary consumers, expired) are absent rows, the same on every read; only an ordinary
consumer of the same queue that takes a message between a batch's first run and its replay
makes the replay miss it (the cursor holds messages against retention, not against consumers).

Retention: ``commit(end)`` moves the cursor to ``end - 1``, one batch late (Spark commits a
batch's source offsets only when it plans the next one). The broker keeps what is at or
above the cursor, so a crashed query always finds the batch it has to run again.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from petrel.client import DUPLICATE_ID, ClientError, Connection, NotFound, QueueSequence, RangeRecord, RequestFailed
from petrel.spark.copies import NoCopies, moved_away, owned, read_gone_range
from petrel.spark.nodes import Nodes
from petrel.spark.offsets import EARLIEST, LATEST, Offsets, advance, key, lookup, parse_offsets, sorted_offsets, split_key

try:  # pyspark >= 4.2
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older pyspark: no admission control, Spark wraps the reader
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

__all__ = ["BatchSource", "DataLoss", "QueueRange", "SourceOptions", "StreamSource", "source_options"]

log = logging.getLogger("petrel.spark.source")

DEFAULT_BROKERS = "tcp://localhost:61616"
PAGE = 1000  # messages per browse request
COMMIT_TIMEOUT = 5.0  # s to try moving a cursor (retention only: the next commit moves it further)
LEFT_LOOK = 2.0  # s between looks at whether a node a task cannot reach has left the cluster


@functools.cache
def arrow_schema():
    """The source's schema (datasource.QUEUE_SCHEMA) in Arrow terms (pyarrow imported on first use)."""
    import pyarrow as pa

    return pa.schema([
        ("node", pa.string()), ("queue", pa.string()), ("seq", pa.int64()), ("message_id", pa.int64()),
        ("dup_id", pa.string()), ("timestamp", pa.int64()), ("priority", pa.int32()),
        ("properties", pa.map_(pa.string(), pa.string())), ("body", pa.binary()),
    ])


FIELDS = ("node", "queue", "seq", "message_id", "dup_id", "timestamp", "priority", "properties", "body")


def check_schema(schema) -> None:
    """The source's schema is fixed (datasource.QUEUE_SCHEMA): refuse another one given with
    ``.schema(...)`` here rather than with an Arrow error in a task."""
    names = tuple(f.name for f in schema.fields) if schema is not None else FIELDS
    if names != FIELDS:
        raise ValueError(f"petrel source: the schema is {', '.join(FIELDS)} (select or cast columns after "
                         f"load()), not {', '.join(names)}")


class DataLoss(RuntimeError):
    """Messages a batch needs were removed from the broker (``failOnDataLoss`` true)."""


@dataclass(frozen=True)
class SourceOptions:
    brokers: str
    patterns: tuple[str, ...]
    starting: str | dict[str, int]
    ending: str | dict[str, int]
    max_per_batch: int | None
    per_partition: int
    subscription: str
    fail_on_data_loss: bool
    timeout: float
    credentials: tuple[tuple[str, str], ...]

    def nodes(self) -> Nodes:
        return Nodes(self.brokers, list(self.patterns), dict(self.credentials), self.timeout)


def source_options(options, starting: str = "acked") -> SourceOptions:
    """The source's options from the data source's (case-insensitive) option map, checked."""
    def get(name: str) -> str | None:
        value = options.get(name)
        return None if value is None or str(value).strip() == "" else str(value).strip()

    def number(name: str, default: int | None) -> int | None:
        raw = get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"petrel source: option {name} must be an integer, not {raw!r}") from None
        if value < 1:
            raise ValueError(f"petrel source: option {name} must be at least 1, not {value}")
        return value

    def offsets(name: str, default: str, words: tuple[str, ...]) -> str | dict[str, int]:
        raw = get(name) or default
        return raw.lower() if raw.lower() in words else parse_offsets(raw, name)

    patterns = tuple(p.strip() for p in (get("queues") or "").split(",") if p.strip())
    if not patterns:
        raise ValueError("petrel source: option queues is required (queue names or wildcards, comma-separated)")
    fail = (get("failOnDataLoss") or "true").lower()
    if fail not in ("true", "false"):
        raise ValueError(f"petrel source: option failOnDataLoss is true or false, not {fail!r}")
    try:
        timeout = float(get("reconnectTimeout") or 60)
    except ValueError:
        raise ValueError(f"petrel source: option reconnectTimeout is seconds, not {get('reconnectTimeout')!r}") from None
    return SourceOptions(
        brokers=get("brokers") or DEFAULT_BROKERS,
        patterns=patterns,
        starting=offsets("startingOffsets", starting, ("acked", "earliest", "latest")),
        ending=offsets("endingOffsets", "latest", ("latest",)),
        max_per_batch=number("maxMessagesPerBatch", None),
        per_partition=number("messagesPerPartition", 10_000),
        subscription=get("subscription") or "spark",
        fail_on_data_loss=fail == "true",
        timeout=timeout,
        credentials=tuple((k, v) for k in ("user", "password") if (v := get(k)) is not None),
    )


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One task: the sequence numbers ``[lo, hi)`` of ``queue`` on ``node``, read at ``url``.
    ``cover``: the batch's end offsets of the queue on every node, as (key, seq), which tell
    the migrated copies it reads elsewhere (copies.py). ``peers``: the other nodes ((node, url,
    first seq to look at)), where the range is read from its copies if the node has left
    (``absent``: already when the batch was planned; its ``url`` is the last known or "")."""

    url: str
    node: str
    queue: str
    lo: int
    hi: int
    cover: tuple[tuple[str, int], ...] = ()
    peers: tuple[tuple[str, str, int], ...] = ()
    absent: bool = False


def plan(start: Offsets, end: Offsets, nodes: Nodes, per_partition: int) -> list[QueueRange]:
    """The tasks of the batch ``[start, end)``, in key and sequence order (the same every time).
    A key only in ``end`` is a queue that joined at ``end``: nothing of it to read yet. The
    range of a node that has left the cluster (scaled down or drained while the batch was
    planned and not committed) is one task reading its copies on the other nodes."""
    out = []
    live: dict[str, str] | None = None
    for k in sorted(end):
        lo, hi = start.get(k, end[k]), end[k]
        if hi <= lo:
            continue
        node, queue = split_key(k)
        cover = tuple((c, v) for c, v in sorted(end.items()) if split_key(c)[1] == queue)
        live = nodes.discover() if live is None else live
        peers = tuple((n, u, start.get(key(n, queue), end.get(key(n, queue), 0)))
                      for n, u in sorted(live.items()) if n != node)
        if node in live:
            url = nodes.url(node)
            out += [QueueRange(url, node, queue, a, min(a + per_partition, hi), cover, peers)
                    for a in range(lo, hi, per_partition)]
            continue
        # not in the cluster: scaled down or drained (its messages moved), or only away for now
        log.warning("petrel source: node %s is not in the cluster; [%d, %d) of %s is read from its copies on %s "
                    "if it moved them, else from it", node, lo, hi, queue, ", ".join(n for n, _, _ in peers),
                    extra={"event": "spark.source.node_gone"})
        out.append(QueueRange(nodes.urls.get(node, ""), node, queue, lo, hi, cover, peers, absent=True))
    return out


# -- executors ----------------------------------------------------------------------------

def read_range(opts: SourceOptions, part: QueueRange, *, stream: bool = True) -> Iterator:
    """The rows of ``part``, read from its node without consuming anything; then a check that
    nothing of the range was removed (data loss) while the query needed it: below the queue's
    lowest cursor (the broker removes what all cursors passed), or, for a stream whose cursor
    is gone with no other left, below the earliest message held. A batch read of a queue
    without cursors cannot tell removed from consumed: no check."""
    credentials = dict(opts.credentials)
    conn: list[Connection] = []

    def connection() -> Connection:
        if not conn:
            c = Connection(part.url, **credentials)
            if c.node_id != part.node:
                c.close()
                raise ClientError(f"petrel source: the broker at {part.url} is node {c.node_id}, not node "
                                  f"{part.node} whose sequence numbers the batch holds")
            conn.append(c)
        return conn[0]

    def request(call, at: int):
        """``call(connection)``, again after a connection failure for up to reconnectTimeout;
        meanwhile, every LEFT_LOOK seconds, whether the node has left the cluster and moved
        its messages: then _Moved with ``[at, hi)`` read from where they went."""
        deadline = time.monotonic() + opts.timeout
        look, pause = time.monotonic() + LEFT_LOOK, 0.1
        while True:
            try:
                return call(connection())
            except (NotFound, RequestFailed):
                raise
            except (ClientError, OSError) as exc:
                if conn:
                    _close(conn.pop())
                if part.peers and time.monotonic() >= look:
                    if (found := moved_away(part, at, credentials, opts.timeout)) is not None:
                        raise _Moved([record_batch(n, part.queue, m) for n, m in found]) from None
                    look = time.monotonic() + LEFT_LOOK
                if time.monotonic() + pause > deadline:
                    raise ClientError(f"petrel source: could not read {part.queue} from node {part.node} at "
                                      f"{part.url} within {opts.timeout:g} s: {exc}") from exc
                log.info("petrel source: cannot read %s from node %s yet (%s); trying again", part.queue,
                         part.node, exc)
                time.sleep(pause)
                pause = min(pause * 2, 2.0)

    if part.absent:  # its node was not in the cluster when the batch was planned
        batches = _read_copies(opts, part)
        if batches is not None:
            yield from batches
            return
    cover = dict(part.cover)
    try:
        lo, earliest = part.lo, None
        try:
            while lo < part.hi:
                got = request(lambda c, lo=lo: c.browse_range(part.queue, lo, part.hi, PAGE), lo)
                if got.next_seq <= lo:
                    raise ClientError(f"petrel source: the broker read nothing of {part.queue} [{lo}, {part.hi})")
                if messages := owned(got.messages, part.node, part.queue, cover):
                    yield record_batch(part.node, part.queue, messages)
                lo, earliest = got.next_seq, got.earliest_seq
            cursors = request(lambda c: c.cursors(part.queue), lo)
        except NotFound:
            _lost(opts, part, f"queue {part.queue} no longer exists on node {part.node}")
            return
        except _Moved as moved:  # the rest of the range, where it went (no cursor there to check)
            yield from moved.batches
            return
        floor = min((c.acked for c in cursors), default=earliest if stream and earliest is not None else part.lo)
        if floor > part.lo:
            holder = ", ".join(f"{c.name} at {c.acked}" for c in cursors) or "none"
            _lost(opts, part, f"the broker has removed sequence numbers [{part.lo}, {min(floor, part.hi)}) of queue "
                              f"{part.queue} on node {part.node} (its cursors: {holder})")
    finally:
        if conn:
            _close(conn.pop())


class _Moved(Exception):
    """The node left the cluster while a task read it; ``batches``: the rest, from its copies."""

    def __init__(self, batches: list) -> None:
        super().__init__("moved")
        self.batches = batches


def _read_copies(opts: SourceOptions, part: QueueRange) -> list | None:
    """The range of a node that is not in the cluster, from its copies on the other nodes
    (copies.py) as Arrow batches; None when none of its messages moved (read it from itself)."""
    try:
        found = read_gone_range(part, dict(opts.credentials), opts.timeout)
    except NoCopies as exc:
        if not part.url:
            raise ClientError(f"{exc}: start it again, or scale it down or drain it") from None
        return None
    return [record_batch(node, part.queue, messages) for node, messages in found]


def _lost(opts: SourceOptions, part: QueueRange, what: str) -> None:
    if opts.fail_on_data_loss:
        raise DataLoss(f"petrel source: data loss: {what}, but the batch needs [{part.lo}, {part.hi}). Another "
                       f"reader may use subscription {opts.subscription!r}, or the queue was purged or deleted. "
                       f"Set failOnDataLoss=false to skip what is gone.")
    log.warning("petrel source: %s; skipped (failOnDataLoss=false)", what, extra={"event": "spark.source.data_loss"})


def _close(c: Connection) -> None:
    try:
        c.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close
        pass


def record_batch(node: str, queue: str, messages: list[RangeRecord]):
    """Messages as one Arrow record batch of the source's schema (datasource.QUEUE_SCHEMA;
    Spark takes these without converting row by row). Property values become text; the
    duplicate ID has its own column."""
    import pyarrow as pa

    n = len(messages)
    props = [[(str(k), _text(v)) for k, v in m.properties.items() if k != DUPLICATE_ID] for m in messages]
    columns = [
        pa.array([node] * n, pa.string()),
        pa.array([queue] * n, pa.string()),
        pa.array([m.seq for m in messages], pa.int64()),
        pa.array([m.message_id for m in messages], pa.int64()),
        pa.array([m.dup_id for m in messages], pa.string()),
        pa.array([m.timestamp for m in messages], pa.int64()),
        pa.array([m.priority for m in messages], pa.int32()),
        pa.array(props, pa.map_(pa.string(), pa.string())),
        pa.array([m.body for m in messages], pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


# -- the driver ---------------------------------------------------------------------------

def positions(nodes: Nodes, opts: SourceOptions, spec: str | dict[str, int], *, cursors: bool) -> Offsets:
    """Where each queue the options name starts (or ends) by ``spec``; with ``cursors``, the
    subscription cursor is made there (an existing one is left where it is)."""
    out: dict[str, int] = {}
    for node, names in nodes.queues().items():
        for queue in names:
            pos = position(nodes, opts, spec, node, queue, cursors=cursors)
            if pos is not None:
                out[key(node, queue)] = pos
    return sorted_offsets(out)


def position(nodes: Nodes, opts: SourceOptions, spec, node: str, queue: str, *, cursors: bool) -> int | None:
    seqs = nodes.seqs(node, queue)
    if seqs is None:
        return None
    sub = opts.subscription
    if spec == "acked":
        if cursors:
            return nodes.call(node, lambda c: c.create_cursor(queue, sub)).acked
        try:
            return nodes.call(node, lambda c: c.cursor(queue, sub)).acked
        except NotFound:
            return seqs.earliest_seq
    if spec == "earliest":
        pos = seqs.earliest_seq
    elif spec == "latest":
        pos = seqs.tail_seq
    else:
        given = lookup(spec, key(node, queue))
        pos = {None: seqs.earliest_seq, EARLIEST: seqs.earliest_seq, LATEST: seqs.tail_seq}.get(given, given)
        if pos > seqs.tail_seq:
            raise ValueError(f"petrel source: queue {queue} on node {node} has assigned sequence numbers below "
                             f"{seqs.tail_seq} only, cannot start at {pos}")
    if cursors:
        nodes.call(node, lambda c: c.create_cursor(queue, sub, pos))
    return pos


class StreamSource(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``readStream.format("petrel")`` (see the module docstring)."""

    def __init__(self, options, schema=None) -> None:
        check_schema(schema)
        self.opts = source_options(options)
        self._reset()

    def _reset(self) -> None:
        self._nodes: Nodes | None = None
        self._initial: Offsets | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: read up to here, no further
        self._latest: Offsets | None = None
        self._committed: dict[str, int] = {}

    def __getstate__(self) -> dict:  # executors get the options only (no connections)
        return {"opts": self.opts}

    def __setstate__(self, state: dict) -> None:
        self.opts = state["opts"]
        self._reset()

    @property
    def nodes(self) -> Nodes:
        if self._nodes is None:
            self._nodes = self.opts.nodes()
        return self._nodes

    def initialOffset(self) -> dict:
        if self._initial is None:  # Spark asks twice
            self._initial = positions(self.nodes, self.opts, self.opts.starting, cursors=True)
            if not self._initial:
                raise ValueError(f"petrel source: no queue matches {', '.join(self.opts.patterns)} on "
                                 f"{', '.join(sorted(self.nodes.urls)) or self.opts.brokers}")
            log.info("petrel source: starting at %s", self._initial, extra={"event": "spark.source.start"})
        return dict(self._initial)

    def _seqs(self) -> dict[str, QueueSequence]:
        out = {}
        for node, names in self.nodes.queues().items():
            for queue in names:
                seqs = self.nodes.seqs(node, queue)
                if seqs is not None:
                    out[key(node, queue)] = seqs
        return out

    def _tails(self, seqs: dict[str, QueueSequence] | None = None) -> Offsets:
        return sorted_offsets({k: s.tail_seq for k, s in (self._seqs() if seqs is None else seqs).items()})

    def getDefaultReadLimit(self):
        if self.opts.max_per_batch is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_per_batch)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._tails()
        log.info("petrel source: available now up to %s", self._target, extra={"event": "spark.source.target"})

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        start = dict(start if start is not None else self.initialOffset())
        seqs = self._seqs()
        tails = self._latest = self._tails(seqs)
        available = tails if self._target is None else self._target
        reset = {}
        for k, upto in start.items():  # a queue whose tail is below the offset was deleted and made again
            if k in seqs and seqs[k].tail_seq < upto:
                what = (f"queue {split_key(k)[1]} on node {split_key(k)[0]} has assigned sequence numbers below "
                        f"{seqs[k].tail_seq} only, but the query has read up to {upto}: it was deleted and "
                        f"created again")
                if self.opts.fail_on_data_loss:
                    raise DataLoss(f"petrel source: data loss: {what}. Set failOnDataLoss=false to read the new "
                                   f"queue from its earliest message.")
                log.warning("petrel source: %s; reading it from its earliest message (failOnDataLoss=false)", what,
                            extra={"event": "spark.source.data_loss"})
                reset[k] = seqs[k].earliest_seq
        joined = {}
        for k in available:  # a queue that appeared since: it joins at its start, read from the next batch
            if k not in start:
                node, queue = split_key(k)
                pos = position(self.nodes, self.opts, "acked", node, queue, cursors=True)
                if pos is not None:
                    joined[k] = pos
        if limit is None:
            limit = self.getDefaultReadLimit()
        budget = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        kept = {k: v for k, v in start.items() if k not in reset}
        upto = {k: v for k, v in available.items() if k in start}
        if budget is not None:
            kept = {**kept, **self._first_held(kept, upto)}
        end = advance(kept, upto, budget)
        return sorted_offsets({**end, **joined, **reset})

    def _first_held(self, start: dict[str, int], upto: dict[str, int]) -> dict[str, int]:
        """Per queue with numbers to read, the first one that holds a message (``upto`` when
        none does): the budget counts from there. A broker restart skips the rest of a queue's
        reservation of sequence numbers (thousands); counted as if held, those made a limited
        query crawl over the gap in empty batches."""
        out = {}
        for k, lo in start.items():
            hi = upto.get(k, lo)
            if hi <= lo:
                continue
            node, queue = split_key(k)
            got = self.nodes.call(node, lambda c, q=queue, lo=lo, hi=hi: c.browse_range(q, lo, hi, 1))
            first = got.messages[0].seq if got.messages else max(got.next_seq, lo)
            if first > lo:
                out[k] = min(first, hi)
        return out

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else dict(self._latest)

    def partitions(self, start: dict, end: dict) -> list[QueueRange]:
        return plan(start, end, self.nodes, self.opts.per_partition)

    def read(self, partition: QueueRange) -> Iterator:
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Everything below ``end`` is processed: the cursors move to ``end - 1`` (retention only)."""
        try:
            live = self.nodes.discover(min(COMMIT_TIMEOUT, self.opts.timeout))
        except ClientError as exc:
            log.warning("petrel source: cannot move cursor %s: %s", self.opts.subscription, exc,
                        extra={"event": "spark.source.commit_failed"})
            return
        for k, upto in sorted(end.items()):
            if upto < 1 or self._committed.get(k, 0) >= upto:
                continue
            node, queue = split_key(k)
            if node not in live:  # not in the cluster (scaled down, or away for now): moved next time
                continue
            try:
                self.nodes.call(node, lambda c: c.ack_upto(queue, self.opts.subscription, upto - 1),
                                timeout=min(COMMIT_TIMEOUT, self.opts.timeout))
            except (ClientError, ValueError) as exc:
                log.warning("petrel source: cannot move cursor %s of %s to %d: %s", self.opts.subscription, k,
                            upto, exc, extra={"event": "spark.source.commit_failed"})
                continue
            self._committed[k] = upto

    def stop(self) -> None:
        if self._nodes is not None:
            self._nodes.close()
            self._nodes = None


class BatchSource(DataSourceReader):
    """``spark.read.format("petrel")``: the range ``[startingOffsets, endingOffsets)`` of the
    queues, read without consuming or moving any cursor (default: everything held now)."""

    def __init__(self, options, schema=None) -> None:
        check_schema(schema)
        self.opts = source_options(options, starting="earliest")

    def partitions(self) -> list[QueueRange]:
        nodes = self.opts.nodes()
        try:
            start = positions(nodes, self.opts, self.opts.starting, cursors=False)
            end = positions(nodes, self.opts, self.opts.ending, cursors=False)
            return plan({k: v for k, v in start.items() if k in end}, end, nodes, self.opts.per_partition)
        finally:
            nodes.close()

    def read(self, partition: QueueRange) -> Iterator:
        return read_range(self.opts, partition, stream=False)
