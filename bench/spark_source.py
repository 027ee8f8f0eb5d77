"""Spark source benchmark: messages/s from a queue's backlog into Parquet through
``readStream.format("petrel")`` on ``local[2]`` (Trigger.AvailableNow, one query), beside
Petrel's own client reading the same messages (``browse_range``, the same non-consuming path)
into Parquet with pyarrow in one process. Issue 12 asks the Spark path to stay within 3x.

One real ``petrel run`` process (``petrel.testing.process.BrokerProcess``) is filled once with
``--count`` persistent messages of ``--size`` bytes; each run reads the whole backlog (nothing
is consumed, so every run reads the same). Figures: wall time and messages/s of each reader,
the ratio of the wall times, and the broker's CPU seconds during the Spark query. A first
streaming query of 1,000 messages warms the session (Python workers, the stream runner);
its time is reported apart.

    .venv/bin/python bench/spark_source.py            # 1,000,000 x 256 B, 3 runs
    .venv/bin/python bench/spark_source.py --quick    # 100,000 x 256 B, 1 run

Results: bench/results/spark-source-<timestamp>.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from petrel.client import Connection, Message
from petrel.testing.process import BrokerProcess

BENCH_DIR = Path(__file__).resolve().parent
QUEUE = "bench.spark.source"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(url: str, count: int, size: int, queue: str = QUEUE) -> None:
    with Connection(url) as conn:
        conn.create_queue(queue)
        with conn.session() as session:
            producer = session.producer(f"queue://{queue}")
            body = b"x" * size
            for i in range(count):
                producer.send(Message(body, {"i": i}, durable=True))
            session.flush()


def own_client(url: str, out: Path) -> int:
    """browse_range page by page into one Parquet file (pyarrow), like the source's tasks do."""
    import pyarrow.parquet as pq

    from petrel.spark.source import arrow_schema, record_batch

    n = 0
    with Connection(url) as conn, pq.ParquetWriter(str(out), arrow_schema()) as writer:
        seqs = conn.queue_seqs(QUEUE)
        lo = seqs.earliest_seq
        while lo < seqs.tail_seq:
            got = conn.browse_range(QUEUE, lo, seqs.tail_seq, 1000)
            if got.messages:
                writer.write_batch(record_batch(conn.node_id, QUEUE, got.messages))
                n += len(got.messages)
            lo = got.next_seq
    return n


def session(scratch: Path):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("petrel-bench-source")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g")
         .config("spark.sql.streaming.ui.enabled", "false").config("spark.local.dir", str(scratch / "local"))
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def spark_query(spark, url: str, out: Path, checkpoint: Path, per_partition: int, queue: str = QUEUE) -> int:
    query = (spark.readStream.format("petrel").option("brokers", url).option("queues", queue)
             .option("startingOffsets", "earliest").option("subscription", checkpoint.name)
             .option("messagesPerPartition", per_partition).load()
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return spark.read.parquet(str(out)).count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-partition", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="100,000 messages, 1 run")
    args = parser.parse_args()
    if args.quick:
        args.count, args.runs = 100_000, 1
    scratch = Path(tempfile.mkdtemp(prefix="petrel-bench-source-"))
    broker = BrokerProcess(scratch / "broker").start()
    url = f"tcp://127.0.0.1:{broker.port}"
    rows = []
    try:
        t = time.monotonic()
        fill(url, args.count, args.size)
        print(f"filled {args.count:,} x {args.size} B in {time.monotonic() - t:.1f} s", flush=True)
        spark = session(scratch)
        fill(url, 1000, args.size, "bench.warm-up")
        t = time.monotonic()
        spark_query(spark, url, scratch / "warm-up", scratch / "ck-warm-up", args.per_partition, "bench.warm-up")
        cold = time.monotonic() - t
        print(f"first (cold) streaming query of 1,000 messages: {cold:.1f} s", flush=True)
        for run in range(args.runs):
            t = time.monotonic()
            n_own = own_client(url, scratch / f"own-{run}.parquet")
            own_s = time.monotonic() - t
            cpu = cpu_seconds(broker.proc.pid)
            t = time.monotonic()
            n_spark = spark_query(spark, url, scratch / f"out-{run}", scratch / f"ck{run}", args.per_partition)
            spark_s = time.monotonic() - t
            cpu = cpu_seconds(broker.proc.pid) - cpu
            assert n_own == n_spark == args.count, (n_own, n_spark)
            rows.append({"run": run, "own_s": own_s, "spark_s": spark_s, "own_rate": args.count / own_s,
                         "spark_rate": args.count / spark_s, "broker_cpu_s_during_spark": cpu})
            print(json.dumps(rows[-1]), flush=True)
        spark.stop()
    finally:
        broker.kill9()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "run"}
    print(f"\n| reader | msgs/s | wall s |\n|---|---|---|\n"
          f"| own client (browse_range -> pyarrow Parquet) | {med['own_rate']:,.0f} | {med['own_s']:.1f} |\n"
          f"| Spark local[2] (readStream petrel -> Parquet) | {med['spark_rate']:,.0f} | {med['spark_s']:.1f} |\n"
          f"\nSpark wall time / own client's = {med['spark_s'] / med['own_s']:.2f} (target: at most 3); "
          f"broker CPU during the Spark query: {med['broker_cpu_s_during_spark']:.1f} s; the first (cold) "
          f"query of a session takes {cold:.1f} s more or less whatever it reads")
    results = BENCH_DIR / "results"
    results.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    (results / f"spark-source-{stamp}.json").write_text(json.dumps(
        {"count": args.count, "size": args.size, "cold_query_s": cold, "runs": rows, "median": med}, indent=1))


if __name__ == "__main__":
    main()
