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

The broker's S1 (stompbench's 1 -> 1, one queue, 1 KiB, non-persistent; ``core_rows.py``'s CORE
clients in a process of their own, ``--s1-count`` messages a run) on the same broker: once per
run with nothing else going on, and back to back during one more Spark query of the whole
backlog (only S1 runs that started once the query was reading and ended before it finished
count as "during"; that query's own time is reported apart, the clean runs above give the
Spark figure). Then the sink (``spark_sink.py``, on a fresh broker, the same session):
``--sink-count`` rows of 1 KiB through ``df.write.format("petrel")`` beside the own client's
publisher.

    .venv/bin/python bench/spark_source.py            # 1,000,000 x 256 B, 3 runs; S1 50,000; sink 200,000 x 1 KiB
    .venv/bin/python bench/spark_source.py --quick    # 100,000 x 256 B, 1 run; S1 20,000; sink 20,000

Results: bench/results/spark-source-<timestamp>.json and markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from petrel.client import Connection, Message  # noqa: E402
from petrel.testing.process import BrokerProcess, wait_for  # noqa: E402
from stompbench.report import source_state  # noqa: E402

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


def own_client(url: str, out: Path, window: int) -> int:
    """browse_range page by page into one Parquet file (pyarrow), like the source's tasks do:
    ranges of ``window`` sequence numbers (the broker's browse_range gathers its whole
    [from, to) range before it cuts a page, so one range up to the tail costs O(backlog) a page)."""
    import pyarrow.parquet as pq

    from petrel.spark.source import arrow_schema, record_batch

    n = 0
    with Connection(url) as conn, pq.ParquetWriter(str(out), arrow_schema()) as writer:
        seqs = conn.queue_seqs(QUEUE)
        lo = seqs.earliest_seq
        while lo < seqs.tail_seq:
            got = conn.browse_range(QUEUE, lo, min(lo + window, seqs.tail_seq), 1000)
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


def start_query(spark, url: str, out: Path, checkpoint: Path, per_partition: int, queue: str = QUEUE):
    return (spark.readStream.format("petrel").option("brokers", url).option("queues", queue)
            .option("startingOffsets", "earliest").option("subscription", checkpoint.name)
            .option("messagesPerPartition", per_partition).load()
            .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def spark_query(spark, url: str, out: Path, checkpoint: Path, per_partition: int, queue: str = QUEUE) -> int:
    query = start_query(spark, url, out, checkpoint, per_partition, queue)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return spark.read.parquet(str(out)).count()


def s1(url: str, count: int) -> dict:
    """One S1 run (core_rows' CORE clients in a spawned process): msgs/s and wall seconds."""
    from core_rows import run_phase
    from stompbench.metrics import Measurement, summarise
    from stompbench.workloads import Counts, build

    phase = build(Counts(s1=count))["S1"].phases[0]
    t = time.monotonic()
    outcome = run_phase(phase, url, 1, 1024)
    m = summarise(phase, outcome.results, Measurement("petrel", "S1", 0, 1))
    error = "; ".join(outcome.errors)[:300] or m.error
    return {"rate": None if error else m.rate, "s": time.monotonic() - t, "error": error}


def s1_during_query(spark, url: str, scratch: Path, per_partition: int, count: int, s1_count: int) -> dict:
    """One more Spark query of the whole backlog with S1 runs back to back beside it."""
    t0 = time.monotonic()
    query = start_query(spark, url, scratch / "out-with-s1", scratch / "ck-with-s1", per_partition)
    # reading: the batch is planned and its tasks run (before, the driver only asks for offsets)
    wait_for(lambda: not query.isActive or (query.status["isDataAvailable"] and query.status["isTriggerActive"]),
             120, 0.05, "the query did not start reading")
    reading = time.monotonic() - t0
    runs = []
    while query.isActive:
        r = s1(url, s1_count)
        r["inside"] = query.isActive
        runs.append(r)
        print(f"S1 during the query: {json.dumps(r)}", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    n = spark.read.parquet(str(scratch / "out-with-s1")).count()
    assert n == count, (n, count)
    return {"spark_s": time.monotonic() - t0, "reading_after_s": reading, "runs": runs}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-partition", type=int, default=20_000)
    parser.add_argument("--s1-count", type=int, default=50_000, help="messages per S1 run (0: no S1)")
    parser.add_argument("--sink-count", type=int, default=200_000, help="rows per sink run (0: no sink)")
    parser.add_argument("--sink-runs", type=int, help="sink runs (default: --runs)")
    parser.add_argument("--budget", type=float, help="seconds: start another run (source or sink) only while "
                        "it should end within this since the start (at least one of each)")
    parser.add_argument("--quick", action="store_true", help="100,000 messages, 1 run, S1 20,000, sink 20,000")
    args = parser.parse_args()
    if args.quick:
        args.count, args.runs, args.s1_count, args.sink_count = 100_000, 1, 20_000, 20_000
    from spark_sink import measure_sink, sink_table

    t_start = time.monotonic()

    def fits(seconds: float) -> bool:
        return args.budget is None or time.monotonic() - t_start + seconds <= args.budget

    env = {"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": source_state(),
           "uptime_before": uptime(), "argv": sys.argv}
    print(f"{env['started']} commit {env['commit']}; {env['uptime_before']}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="petrel-bench-source-"))
    broker = BrokerProcess(scratch / "broker").start()
    url = f"tcp://127.0.0.1:{broker.port}"
    rows, during, sink_rows, spark = [], None, [], None
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
            if rows:  # this run as long as the last, then the query with S1 and one sink run (~10k msgs/s)
                last = rows[-1]
                reserve = 1.5 * last["spark_s"] + 2 * args.sink_count / 10_000 + 15
                if not fits(last["own_s"] + last["spark_s"] + 5 + reserve):
                    print(f"budget: {run} source run(s)", flush=True)
                    break
            t = time.monotonic()
            n_own = own_client(url, scratch / f"own-{run}.parquet", args.per_partition)
            own_s = time.monotonic() - t
            alone = s1(url, args.s1_count) if args.s1_count else {}
            cpu = cpu_seconds(broker.proc.pid)
            t = time.monotonic()
            n_spark = spark_query(spark, url, scratch / f"out-{run}", scratch / f"ck{run}", args.per_partition)
            spark_s = time.monotonic() - t
            cpu = cpu_seconds(broker.proc.pid) - cpu
            assert n_own == n_spark == args.count, (n_own, n_spark)
            rows.append({"run": run, "own_s": own_s, "spark_s": spark_s, "own_rate": args.count / own_s,
                         "spark_rate": args.count / spark_s, "broker_cpu_s_during_spark": cpu,
                         "s1_alone": alone.get("rate"), "s1_alone_error": alone.get("error")})
            print(json.dumps(rows[-1]), flush=True)
        if args.s1_count:
            during = s1_during_query(spark, url, scratch, args.per_partition, args.count, args.s1_count)
            print(f"query with S1 beside it: {during['spark_s']:.1f} s", flush=True)
        broker.kill9()
        if args.sink_count:
            broker = BrokerProcess(scratch / "sink-broker").start()
            sink_rows = measure_sink(spark, f"tcp://127.0.0.1:{broker.port}", args.sink_count, 1024,
                                     args.sink_runs or args.runs, progress=lambda line: print(line, flush=True),
                                     more=lambda last: fits(last["spark_s"] + last["own_s"] + 5))
    finally:
        if spark is not None:
            spark.stop()
        broker.kill9()
        shutil.rmtree(scratch, ignore_errors=True)
    env["uptime_after"] = uptime()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]
           if k not in ("run", "s1_alone", "s1_alone_error")}
    print(f"\n{env['started']} commit {env['commit']}\nbefore: {env['uptime_before']}\n"
          f"after:  {env['uptime_after']}\n\n"
          f"| reader ({args.count:,} x {args.size} B, median of {len(rows)}) | msgs/s | wall s |\n|---|---|---|\n"
          f"| own client (browse_range -> pyarrow Parquet) | {med['own_rate']:,.0f} | {med['own_s']:.1f} |\n"
          f"| Spark local[2] (readStream petrel -> Parquet) | {med['spark_rate']:,.0f} | {med['spark_s']:.1f} |\n"
          f"\nSpark wall time / own client's = {med['spark_s'] / med['own_s']:.2f} (target: at most 3); "
          f"broker CPU during the Spark query: {med['broker_cpu_s_during_spark']:.1f} s; the first (cold) "
          f"query of a session takes {cold:.1f} s more or less whatever it reads")
    summary = {}
    if during is not None:
        alone = [r["s1_alone"] for r in rows if r["s1_alone"]]
        inside = [r["rate"] for r in during["runs"] if r["inside"] and r["rate"]]
        summary = {"s1_alone_median": statistics.median(alone) if alone else None, "s1_alone_runs": len(alone),
                   "s1_during_median": statistics.median(inside) if inside else None, "s1_during_runs": len(inside)}
        ratio = (f"{summary['s1_during_median'] / summary['s1_alone_median']:.2f}x"
                 if inside and alone else "n/a")
        print(f"\n| S1 ({args.s1_count:,} x 1 KiB, non-persistent, 1 -> 1) on the source's broker | msgs/s |\n"
              f"|---|---|\n| alone (median of {len(alone)}) | {_fmt(summary['s1_alone_median'])} |\n"
              f"| while the Spark query reads (median of {len(inside)}) | {_fmt(summary['s1_during_median'])} |\n"
              f"| during / alone | {ratio} |\n\nthe Spark query with S1 beside it: {during['spark_s']:.1f} s "
              f"({args.count / during['spark_s']:,.0f} msgs/s), reading {during['reading_after_s']:.1f} s after start")
    if sink_rows:
        print("\n" + sink_table(sink_rows, args.sink_count, 1024))
    results = BENCH_DIR / "results"
    results.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    (results / f"spark-source-{stamp}.json").write_text(json.dumps(
        {"count": args.count, "size": args.size, "env": env, "cold_query_s": cold, "runs": rows, "median": med,
         "s1_count": args.s1_count, "s1_during_query": during, "s1": summary, "sink_count": args.sink_count,
         "sink_runs": sink_rows}, indent=1))


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


if __name__ == "__main__":
    main()
