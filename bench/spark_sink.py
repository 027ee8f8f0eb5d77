"""Spark sink benchmark: messages/s from a DataFrame of ``--count`` rows of ``--size`` bytes into
a queue through ``df.write.format("petrel")`` on ``local[2]`` (two partitions, so two tasks
publish at once, each in transactions of ``chunkSize`` 500 with a duplicate ID per row, durable),
beside Petrel's own client publishing the same messages the same way (``petrel.spark.publish``'s
``Publisher``: chunks of 500, one transaction each, the same duplicate IDs) in one process.

Each run writes into a new queue of one real ``petrel run`` process, checks that the queue holds
exactly ``--count`` messages, then deletes it. A first write of 1,000 rows warms the session.

    .venv/bin/python bench/spark_sink.py              # 200,000 x 1 KiB, 3 runs
    .venv/bin/python bench/spark_sink.py --quick      # 20,000 x 1 KiB, 1 run

``bench/spark_source.py`` runs the same measurement after its source rows (``--sink-count``).
Results: bench/results/spark-sink-<timestamp>.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from petrel.client import DUPLICATE_ID, Connection, Message  # noqa: E402
from petrel.testing.process import BrokerProcess, wait_for  # noqa: E402

CHUNK = 500


def queue_count(url: str, queue: str) -> int:
    with Connection(url) as conn:
        info = conn.queue_info(queue)
    return int(info["message_count"]) if info else 0


def drop_queue(url: str, queue: str) -> None:
    with Connection(url) as conn:
        conn.delete_queue(queue)


def spark_write(spark, url: str, queue: str, count: int, size: int) -> float:
    """Seconds for ``df.write.format("petrel")`` of ``count`` rows of ``size`` bytes into ``queue``."""
    with Connection(url) as conn:
        conn.create_queue(queue)
    df = spark.range(0, count, 1, numPartitions=2).selectExpr(f"CAST(repeat('x', {size}) AS BINARY) AS body")
    t = time.monotonic()
    (df.write.format("petrel").option("brokers", url).option("address", f"queue://{queue}")
     .option("chunkSize", CHUNK).mode("append").save())
    return time.monotonic() - t


def own_publish(url: str, queue: str, count: int, size: int) -> float:
    """Seconds for Petrel's own client to publish the same messages as the sink does."""
    from petrel.spark.publish import Publisher

    with Connection(url) as conn:
        conn.create_queue(queue)
    body, prefix, destination = b"x" * size, uuid.uuid4().hex, f"queue://{queue}"
    t = time.monotonic()
    with Publisher(url) as publisher:
        for lo in range(0, count, CHUNK):
            publisher.publish([(destination, Message(body, {DUPLICATE_ID: f"{prefix}:{i}"}, durable=True))
                               for i in range(lo, min(count, lo + CHUNK))])
    return time.monotonic() - t


def measure_sink(spark, url: str, count: int, size: int, runs: int, progress=print,
                 more=lambda last_run: True) -> list[dict]:
    """``runs`` times (fewer once ``more(last run)`` says no): the Spark sink, then the own client,
    each into a new queue (checked, deleted)."""
    spark_write(spark, url, "bench.sink.warm-up", 1000, size)
    drop_queue(url, "bench.sink.warm-up")
    rows = []
    for run in range(runs):
        if rows and not more(rows[-1]):
            break
        row: dict = {"run": run}
        for key, write in (("spark", lambda q: spark_write(spark, url, q, count, size)),
                           ("own", lambda q: own_publish(url, q, count, size))):
            queue = f"bench.sink.{key}.{run}"
            seconds = write(queue)
            # every row is in the queue once (the sink's commit returns after the brokers' commits)
            wait_for(lambda q=queue: queue_count(url, q) == count, 30, 0.1,
                     f"{queue}: {queue_count(url, queue)} of {count} messages")
            drop_queue(url, queue)
            row[f"{key}_s"], row[f"{key}_rate"] = seconds, count / seconds
        rows.append(row)
        progress(json.dumps(rows[-1]))
    return rows


def sink_table(rows: list[dict], count: int, size: int) -> str:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "run"}
    return (f"| writer ({count:,} x {size} B, median of {len(rows)}) | msgs/s | wall s |\n|---|---|---|\n"
            f"| own client (Publisher, transactions of {CHUNK}, one process) | {med['own_rate']:,.0f} | "
            f"{med['own_s']:.1f} |\n"
            f"| Spark local[2] (df.write.format(\"petrel\"), 2 tasks) | {med['spark_rate']:,.0f} | "
            f"{med['spark_s']:.1f} |\n\nSpark wall time / own client's = {med['spark_s'] / med['own_s']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 1 run")
    args = parser.parse_args()
    if args.quick:
        args.count, args.runs = 20_000, 1
    from spark_source import session

    scratch = Path(tempfile.mkdtemp(prefix="petrel-bench-sink-"))
    broker = BrokerProcess(scratch / "broker").start()
    try:
        spark = session(scratch)
        try:
            rows = measure_sink(spark, f"tcp://127.0.0.1:{broker.port}", args.count, args.size, args.runs)
        finally:
            spark.stop()
    finally:
        broker.kill9()
    print("\n" + sink_table(rows, args.count, args.size))
    results = BENCH_DIR / "results"
    results.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    (results / f"spark-sink-{stamp}.json").write_text(json.dumps(
        {"count": args.count, "size": args.size, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
