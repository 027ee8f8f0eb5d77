"""A streaming query from broker queues into Parquet through readStream.format("petrel"), run
as a process of its own so a test can kill -9 it mid-batch; the tests also call `run` in
their own process (the same query, the same checkpoint).

    python source_job.py BROKER_URL QUEUES OUTPUT CHECKPOINT SCRATCH [OPTION=VALUE ...]

Trigger.AvailableNow; source options as OPTION=VALUE.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_session import build_session  # noqa: E402


def run(spark, url: str, queues: str, output: str, checkpoint: str, **options: str):
    reader = spark.readStream.format("petrel").option("brokers", url).option("queues", queues)
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (reader.load().writeStream.format("parquet").option("path", output)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    return query


if __name__ == "__main__":
    url, queues, output, checkpoint, scratch, *rest = sys.argv[1:]
    session = build_session(Path(scratch), "petrel-source-job")
    run(session, url, queues, output, checkpoint, **dict(arg.split("=", 1) for arg in rest))
    session.stop()
