"""A streaming query from JSON files into a broker queue through format("petrel"), run as a
process of its own so a test can kill -9 it mid-batch.

    python stream_job.py SOURCE CHECKPOINT BROKER_URL STATS_FILE SCRATCH

One file per micro-batch; 10 messages per broker transaction.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_session import build_session  # noqa: E402


def run(spark, source: str, checkpoint: str, url: str, stats: str):
    from pyspark.sql import functions as F

    rows = spark.readStream.schema("id long, body string").option("maxFilesPerTrigger", 1).json(source)
    out = rows.select("body", F.col("id").cast("int").alias("priority"))
    query = (out.writeStream.format("petrel").option("brokers", url).option("address", "queue://spark.stream")
             .option("chunkSize", "10").option("statsFile", stats).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return query


if __name__ == "__main__":
    source, checkpoint, url, stats, scratch = sys.argv[1:]
    session = build_session(Path(scratch), "petrel-stream-job")
    run(session, source, checkpoint, url, stats)
    session.stop()
