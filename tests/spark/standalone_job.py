"""source_job's query (a queue into Parquet through readStream.format("petrel"), AvailableNow)
with a driver of its own on a standalone cluster: the tests' process already holds a local
SparkSession, and a JVM has one SparkContext.

    python standalone_job.py MASTER_URL BROKER_URL QUEUES OUTPUT CHECKPOINT SCRATCH [OPTION=VALUE ...]

Prints one JSON line: the application id and master the query ran on, and its batch count.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from source_job import run  # noqa: E402


def cluster_session(master: str, scratch: Path):
    """The test session's settings that matter on a cluster, and one executor of one core."""
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    java = f"-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile=file:{HERE / 'log4j2.properties'}"
    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.sql.streaming.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
            "spark.sql.adaptive.enabled": "false", "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": java, "spark.executor.extraJavaOptions": java,
            "spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "1",
            "spark.local.dir": str(scratch / "local"), "spark.sql.warehouse.dir": str(scratch / "warehouse")}
    builder = SparkSession.builder.master(master).appName("petrel-standalone-job")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


if __name__ == "__main__":
    master, url, queues, output, checkpoint, scratch, *rest = sys.argv[1:]
    session = cluster_session(master, Path(scratch))
    try:
        query = run(session, url, queues, output, checkpoint, **dict(arg.split("=", 1) for arg in rest))
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        print(json.dumps({"app_id": session.sparkContext.applicationId, "master": session.sparkContext.master,
                          "batches": query.lastProgress["batchId"] + 1 if query.lastProgress else 0}), flush=True)
    finally:
        session.stop()
