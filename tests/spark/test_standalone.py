"""readStream.format("petrel") on a standalone master + worker (for when one machine is not
enough; shared/reference/spark.md §5): both started from the pip pyspark distribution
(`petrel.testing.spark_cluster`), the query's driver in a process of its own, its read()
tasks on the worker's executor; a real broker's queue into Parquet, every message once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from petrel.client import Connection, Message
from petrel.testing.spark_cluster import StandaloneSpark

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HERE = Path(__file__).resolve().parent
COUNT = 600


def test_a_queue_into_parquet_on_a_standalone_master_and_worker(spark, broker_factory, tmp_path):
    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    with Connection(url) as conn:
        conn.create_queue("standalone.q")
        with conn.session() as session:
            producer = session.producer("queue://standalone.q")
            for i in range(COUNT):
                producer.send(Message(f"m-{i}".encode(), {"i": i}, durable=True))
            session.flush()
    cluster = StandaloneSpark(tmp_path / "cluster", cores=1, memory="1g")
    try:
        cluster.start()
        out, ck = tmp_path / "out", tmp_path / "ck"
        job = subprocess.run(
            [sys.executable, str(HERE / "standalone_job.py"), cluster.master_url, url, "standalone.q", str(out),
             str(ck), str(tmp_path / "driver"), "startingOffsets=earliest", "messagesPerPartition=100",
             "maxMessagesPerBatch=300"],
            env=cluster.env(), capture_output=True, text=True, timeout=180)
        assert job.returncode == 0, f"{job.stdout[-3000:]}\n{job.stderr[-5000:]}"
        ran = json.loads(job.stdout.strip().splitlines()[-1])
        assert ran["master"] == cluster.master_url and ran["batches"] == 2
        # the application ran on this master, its tasks on this worker's executor
        assert ran["app_id"] in [a["id"] for a in cluster.state()["completedapps"]]
        assert list((tmp_path / "cluster" / "work" / ran["app_id"]).iterdir())
    finally:
        cluster.stop()
    rows = spark.read.parquet(str(out)).collect()  # through _spark_metadata: no orphan files
    assert sorted(r.body.decode() for r in rows) == sorted(f"m-{i}" for i in range(COUNT))
    assert sorted(r.seq for r in rows) == sorted({r.seq for r in rows})
