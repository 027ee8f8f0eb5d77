"""``petrel spark recover``: what a failed or partial drain left in data directories, moved to a
live broker with the drainer's duplicate IDs, so nothing arrives twice.

The job:

1. locks each data directory (``server.lock``, as a broker or ``petrel drain`` would: a
   directory a running broker holds is refused) and learns its node ID, the *origin* of its
   messages;
2. reads the directories with the journal reader's resolved view
   (``read_journal(..., view="resolved")``): the messages each queue still holds;
3. asks the target (MIGRATION_BEGIN) for its node ID and the size of its ``MIGRATION.<origin>``
   cache; at most half of it is sent per round (the drainer's window), so the IDs a killed
   drain left there are still there when their messages come again;
4. splits each queue, in its delivery order (priority 9 first, then sequence), into chunks,
   one Spark partition per (queue, chunk); round *r* sends chunk *r* of each queue, in
   parallel across queues, so each queue arrives in order (``petrel.spark.migrate`` sends);
5. checks that every message was confirmed by the target, and counts the target's queues.

Nothing is removed from the directories: run it again and every message is dropped by the
target as already there — as long as the target's ``MIGRATION.<origin>`` cache still holds
their IDs (``id_cache_size``, at least 100,000 entries; the report warns above it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from petrel.spark.journal import data_directories
from petrel.spark.migrate import MessageRef, MigrateFailed, QueueSpec, migrate_chunk, probe, read_queue_spec
from petrel.storage.journal.segment import CONTROL_FILE
from petrel.storage.server_lock import DataDirLocked, ServerLock, read_node_id

__all__ = ["RecoverFailed", "RecoverReport", "lock_directories", "plan_rounds", "preflight", "recover"]

log = logging.getLogger("petrel.spark.recover")

DEFAULT_CHUNK = 10_000


class RecoverFailed(Exception):
    """The recovery could not finish; what was confirmed is on the target, the rest is not."""


@dataclass
class QueueResult:
    node: str
    queue: str
    held: int
    confirmed: int = 0
    on_target: int | None = None  # the target queue's message count afterwards


@dataclass
class RecoverReport:
    target_node: str
    cache_size: int
    queues: list[QueueResult] = field(default_factory=list)
    damaged_rows: int = 0

    @property
    def held(self) -> int:
        return sum(q.held for q in self.queues)

    @property
    def confirmed(self) -> int:
        return sum(q.confirmed for q in self.queues)

    @property
    def complete(self) -> bool:
        return all(q.confirmed == q.held for q in self.queues)


def lock_directories(paths: list[str]) -> tuple[list[Path], dict[str, str], list[ServerLock]]:
    """The data directories, their node IDs, and their held locks. Raises RecoverFailed for a
    directory a live broker holds, one without a node ID, or one with a pending compaction."""
    dirs = data_directories(",".join(paths))
    locks: list[ServerLock] = []
    nodes: dict[str, str] = {}
    try:
        for d in dirs:
            node = read_node_id(d)
            if node is None:
                raise RecoverFailed(f"{d} has no server.lock with a node ID: not a broker's data directory")
            for sub in ("journal", "bindings"):
                if (d / sub / CONTROL_FILE).exists():
                    raise RecoverFailed(f"{d}/{sub} has a pending compaction ({CONTROL_FILE}): start a broker on it "
                                        "once (or run petrel drain), which rolls it forward, then recover")
            lock = ServerLock(d)
            try:
                lock.acquire()
            except DataDirLocked as exc:
                raise RecoverFailed(f"{exc} (a live broker: drain it or stop it first)") from None
            locks.append(lock)
            nodes[str(d)] = node
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return dirs, nodes, locks


def _probe(target: str, origin: str, user: str, password: str, timeout: float) -> dict:
    try:
        return probe(target, origin, user, password, timeout)
    except MigrateFailed as exc:
        raise RecoverFailed(str(exc)) from None


def preflight(data_dirs: list[str], target: str, *, user: str, password: str, timeout: float = 10.0) -> dict:
    """What ``recover`` checks before reading anything, without Spark: the directories can be
    locked (no live broker holds them) and the target takes a migration from their node (the
    credentials). Returns the target's answer; raises RecoverFailed."""
    _, nodes, locks = lock_directories(data_dirs)
    try:
        return _probe(target, sorted(set(nodes.values()))[0], user, password, timeout)
    finally:
        for lock in locks:
            lock.release()


def plan_rounds(counts: dict[tuple, int], chunk: int, window: int) -> list[list[tuple]]:
    """Rounds of (queue key, chunk number): chunk n of a queue in a later round than chunk n-1,
    at most ``window`` messages per round (``chunk`` <= ``window``)."""
    left = {key: [(n, min(chunk, total - n * chunk)) for n in range(-(-total // chunk))]
            for key, total in sorted(counts.items()) if total > 0}
    rounds: list[list[tuple]] = []
    while any(left.values()):
        this, size = [], 0
        for key, chunks in left.items():
            if chunks and (not this or size + chunks[0][1] <= window):
                n, k = chunks.pop(0)
                this.append((*key, n))
                size += k
        rounds.append(this)
    return rounds


def recover(spark, data_dirs: list[str], target: str, *, user: str, password: str, chunk: int = DEFAULT_CHUNK,
            timeout: float = 10.0) -> RecoverReport:
    """Move every message held in ``data_dirs`` to ``target``; the report says what happened.
    Raises RecoverFailed (nothing delivered twice; run it again once the cause is fixed)."""
    dirs, nodes, locks = lock_directories(data_dirs)
    try:
        return _recover(spark, dirs, nodes, target, user, password, chunk, timeout)
    finally:
        for lock in locks:
            lock.release()


def _recover(spark, dirs: list[Path], nodes: dict[str, str], target: str, user: str, password: str,
             chunk: int, timeout: float) -> RecoverReport:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from petrel.spark.resolve import read_journal, resolve

    begun = _probe(target, sorted(set(nodes.values()))[0], user, password, timeout)  # before any reading
    raw = read_journal(spark, ",".join(str(d) for d in dirs), view="raw", large_bodies=False)
    raw = raw.localCheckpoint(eager=True)
    damaged = raw.where(F.col("error").isNotNull()).count()
    if damaged:
        log.warning("%d records of %s are damaged or torn; recover moves what recovery would keep", damaged,
                    ", ".join(map(str, dirs)), extra={"event": "spark.recover.damaged"})
    held = (resolve(raw).select("node", "data_dir", "queue_id", "queue", "source", "file", "offset", "message_id",
                                "seq", "priority", "delivery_count"))
    held = held.withColumn("n", F.row_number().over(
        Window.partitionBy("data_dir", "queue_id").orderBy(F.desc("priority"), F.asc("seq"), F.asc("source"))) - 1)
    held = held.localCheckpoint(eager=True)
    counts = {(r.data_dir, r.queue_id): r.n for r in held.groupBy("data_dir", "queue_id").agg(
        F.count("*").alias("n")).collect()}

    # the queues' definitions, from their QUEUE records (the last ADD of each)
    queue_rows = (raw.where((F.col("kind") == "bindings") & (F.col("user_type") == "QUEUE")
                            & F.col("record_type").isin("ADD", "ADD_TX"))
                  .groupBy("data_dir", "record_id")
                  .agg(F.max(F.struct("segment", "offset", "file")).alias("at")).collect())
    specs = {(r.data_dir, r.record_id): read_queue_spec(r.data_dir, r.at.file, r.at.offset, r.record_id)
             for r in queue_rows if (r.data_dir, r.record_id) in counts}
    missing = sorted(set(counts) - set(specs))
    if missing:
        raise RecoverFailed(f"no QUEUE record found for queue ids {missing[:5]} that hold messages")

    cache = int(begun.get("id_cache_size") or 0)
    window = max(1, cache // 2) if cache > 0 else DEFAULT_CHUNK
    report = RecoverReport(str(begun.get("node_id") or "?"), cache, damaged_rows=damaged)
    results = {key: QueueResult(nodes[key[0]], specs[key].name, n) for key, n in sorted(counts.items())}
    report.queues = list(results.values())
    if report.held > cache > 0:
        log.warning("%d messages to move, more than the target's MIGRATION cache (%d): a second recover of the "
                    "same directories could deliver the oldest of them again", report.held, cache,
                    extra={"event": "spark.recover.over_cache"})
    if not counts:
        return report
    rounds = plan_rounds(counts, max(1, min(chunk, window)), window)
    keys = [key for this in rounds for key in this]
    index = {key: i for i, key in enumerate(keys)}
    size = max(1, min(chunk, window))
    pairs = (held.rdd.map(lambda r: ((r.data_dir, r.queue_id, r.n // size), r))
             .partitionBy(len(keys), lambda k: index[k]))
    send = _sender(target, user, password, nodes, specs, timeout)
    sc = spark.sparkContext
    for number, this in enumerate(rounds):
        log.info("round %d of %d: %d chunks", number + 1, len(rounds), len(this),
                 extra={"event": "spark.recover.round"})
        try:
            outcomes = sc.runJob(pairs, send, [index[k] for k in this])
        except Exception as exc:  # a task failed: its reason is in the Java error's text
            raise RecoverFailed(_task_reason(exc)) from None
        for data_dir, queue_id, confirmed in outcomes:
            results[(data_dir, queue_id)].confirmed += confirmed
    _count_on_target(target, report)
    if not report.complete:
        short = [f"{q.queue}: {q.confirmed} of {q.held}" for q in report.queues if q.confirmed != q.held]
        raise RecoverFailed("not every message was confirmed by the target (" + "; ".join(short) + ")")
    return report


def _sender(target: str, user: str, password: str, nodes: dict[str, str], specs: dict[tuple, QueueSpec],
            timeout: float):
    """The function each task runs on its partition: one (queue, chunk), sent in queue order."""

    def send(pairs: Iterator[tuple]) -> Iterator[tuple]:
        rows = sorted((row for _, row in pairs), key=lambda r: r.n)
        if not rows:
            return iter(())
        first = rows[0]
        spec = specs[(first.data_dir, first.queue_id)]
        refs = (MessageRef(r.data_dir, r.source, r.file, r.offset, r.message_id, r.seq, r.delivery_count or 0)
                for r in rows)
        sent = migrate_chunk(target, nodes[first.data_dir], user, password, spec, refs, timeout=timeout)
        return iter([(first.data_dir, first.queue_id, sent.confirmed)])

    return send


def _task_reason(exc: Exception) -> str:
    text = str(exc)
    for line in text.splitlines():
        if "MigrateFailed:" in line:
            return line.split("MigrateFailed:", 1)[1].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else type(exc).__name__


def _count_on_target(target: str, report: RecoverReport) -> None:
    """The target's message count of each queue moved (consumers there may already have taken some)."""
    from petrel.client import ClientError, Connection

    url = target if "://" in target else f"tcp://{target}"
    try:
        with Connection(url) as conn:
            for q in report.queues:
                info = conn.queue_info(q.queue)
                q.on_target = None if info is None else int(info["message_count"])
    except ClientError as exc:
        log.warning("could not count the target's queues: %s", exc)
