"""A local SparkSession with the settings of shared/reference/spark.md §1, for test and chaos
processes that run Spark queries (and are killed): ``local[2]``, no UI, 2 shuffle partitions,
a small serial-GC driver, Spark's own logging at error; Python workers run this interpreter
(``PYSPARK_PYTHON``), which has Petrel and pyarrow. Environment first: it only reaches the
workers when set before the JVM starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["build_session"]

LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def build_session(scratch: Path, app: str = "petrel", *, log4j: Path | None = None):
    """The session (scratch: Spark's local and warehouse directories; log4j: a log4j2 file, else
    one at level error is written into scratch)."""
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    if log4j is None:
        log4j = scratch / "log4j2.properties"
        log4j.write_text(LOG4J)
    java = f"-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile=file:{log4j}"
    session = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.ui.enabled", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.extraJavaOptions", java)
        .config("spark.executor.extraJavaOptions", java)
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
