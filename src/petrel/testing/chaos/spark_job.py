"""The Spark query of the ``spark`` (and ``spark-sink``) chaos topology, a process of its own so
the harness can ``kill -9`` it (its process group: the driver, the JVM, the Python workers) at any
moment:

    python -m petrel.testing.chaos.spark_job --url tcp://127.0.0.1:PORT --queue chaos.q \
        --output DIR --checkpoint DIR --scratch DIR --finish FILE --result FILE [--max-per-batch N]

``--mode sink --input DIR``: the query is the other way round, JSON files of ``{"body": ...}``
(one file per micro-batch) -> ``writeStream.format("petrel")`` into the queue, ``--chunk`` rows
per broker transaction; nothing is read back (the harness drains the queue).

It builds one local SparkSession (`petrel.testing.spark_session`) and runs
``readStream.format("petrel")`` -> Parquet with ``Trigger.AvailableNow`` from the checkpoint,
again and again (a run per pass, like a scheduled job), printing a JSON line per run;
``{"event": "ready"}`` after the first pass (the first jobs and the Python workers are warm then).
Once the `finish` file exists, the next run that starts is the last: it reads everything sent
before (the harness makes the file after the producers are done), then the output is read back
through Spark (the sink's ``_spark_metadata`` leaves out files of killed tasks and batches) and
written to `result` as JSON. Exit 0 then; 1 when a query fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SUBSCRIPTION = "chaos"


def _say(**event) -> None:
    print(json.dumps(event), flush=True)


def run_once(spark, args) -> tuple[int, int]:
    """One AvailableNow query from the checkpoint; (micro-batches, rows) it ran."""
    if args.mode == "sink":
        return run_sink(spark, args)
    reader = (spark.readStream.format("petrel").option("brokers", args.url).option("queues", args.queue)
              .option("subscription", SUBSCRIPTION).option("messagesPerPartition", str(args.per_partition)))
    if args.max_per_batch:
        reader = reader.option("maxMessagesPerBatch", str(args.max_per_batch))
    query = (reader.load().writeStream.format("parquet").option("path", args.output)
             .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    progress = query.recentProgress
    return len(progress), sum(p.numInputRows for p in progress)


def run_sink(spark, args) -> tuple[int, int]:
    rows = spark.readStream.schema("body string").option("maxFilesPerTrigger", 1).json(args.input)
    query = (rows.writeStream.format("petrel").option("brokers", args.url).option("address", f"queue://{args.queue}")
             .option("chunkSize", str(args.chunk)).option("attempts", "40")
             .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    progress = query.recentProgress
    return len(progress), sum(p.numInputRows for p in progress)


def read_back(spark, args) -> dict:
    """The committed output, read through Spark (so through ``_spark_metadata``), and how many
    rows all the Parquet files in the directory hold (orphans of killed batches included)."""
    from pyspark.sql import functions as F

    out = Path(args.output)
    if not (out / "_spark_metadata").is_dir():
        return {"rows": [], "files": 0, "raw_rows": 0}
    df = spark.read.parquet(args.output).select(
        F.substring_index(F.col("body").cast("string"), "|", 1).alias("mid"), "dup_id", "node", "seq")
    rows = [[r.mid, r.dup_id, r.node, r.seq] for r in df.collect()]
    files = sorted(p for p in out.rglob("*.parquet"))
    raw = torn = 0
    if files:
        import pyarrow.parquet as pq

        for p in files:
            try:
                raw += pq.ParquetFile(p).metadata.num_rows
            except Exception:  # noqa: BLE001 - a file its killed task never finished (empty, no footer)
                torn += 1
    return {"rows": rows, "files": len(files), "raw_rows": raw, "torn_files": torn}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m petrel.testing.chaos.spark_job")
    for name in ("url", "queue", "output", "checkpoint", "scratch", "finish", "result"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--max-per-batch", type=int, default=0)
    parser.add_argument("--per-partition", type=int, default=500)
    parser.add_argument("--mode", choices=("source", "sink"), default="source")
    parser.add_argument("--input", help="sink mode: the directory of JSON files")
    parser.add_argument("--chunk", type=int, default=50, help="sink mode: rows per broker transaction")
    args = parser.parse_args(argv)

    from petrel.testing.spark_session import build_session

    spark = build_session(Path(args.scratch), "petrel-chaos-query")
    finish = Path(args.finish)
    run = 0
    while True:
        last = finish.exists()
        started = time.monotonic()
        try:
            batches, rows = run_once(spark, args)
        except Exception as exc:  # noqa: BLE001 - reported to the harness, which restarts the process
            _say(event="failed", run=run, error=str(exc)[:2000])
            return 1
        _say(event="run", run=run, batches=batches, rows=rows, seconds=round(time.monotonic() - started, 2),
             last=last)
        if run == 0:
            _say(event="ready")
        run += 1
        if last:
            break
        if rows == 0:  # nothing came: a pause before the next pass (the finish file ends it early)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline and not finish.exists():
                time.sleep(0.05)
    result = read_back(spark, args) if args.mode == "source" else {"rows": [], "files": 0, "raw_rows": 0}
    Path(args.result + ".tmp").write_text(json.dumps(result))
    Path(args.result + ".tmp").replace(args.result)
    _say(event="done", rows=len(result["rows"]), files=result["files"], raw_rows=result["raw_rows"],
         torn_files=result.get("torn_files", 0))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
