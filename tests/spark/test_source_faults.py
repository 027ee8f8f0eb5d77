"""readStream.format("petrel") into Parquet through crashes, every message exactly once:

- the query process killed with kill -9 in the middle of a batch (its link to the broker
  frozen once a batch is planned and not committed), then run again from its checkpoint;
- the broker killed with kill -9 in the middle of a batch and started again on its data
  directory, while the query waits for it and goes on;
- the live of a replicated pair killed with kill -9 in the middle of a batch: the query goes on
  reading from the backup.

Each batch's files (listed in the sink's _spark_metadata) hold exactly the sequence range the
checkpoint logged for it: a replayed batch reads what the lost attempt would have.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from petrel.client import Connection, Message
from petrel.testing.ha import make_pair, start_pair, stop_all
from petrel.testing.process import wait_for
from petrel.testing.proxy import TcpProxy

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from source_job import run  # noqa: E402

COUNT = 1000
OPTIONS = {"maxMessagesPerBatch": "200", "messagesPerPartition": "20"}  # 5 batches of 10 tasks


def send(conn: Connection, queue: str, n: int) -> set[str]:
    conn.create_queue(queue)
    with conn.session() as session:
        producer = session.producer(f"queue://{queue}")
        for i in range(n):
            producer.send(Message(f"{queue}-{i}".encode(), {"i": i}, duplicate_id=f"{queue}-{i}"))
        session.flush()
    return {f"{queue}-{i}" for i in range(n)}


def logged(checkpoint: Path, kind: str) -> set[int]:
    d = checkpoint / kind
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()


def uncommitted_files(out: Path) -> set[str]:
    """Parquet files of the output that no committed batch lists (tasks of a batch in flight)."""
    meta = out / "_spark_metadata"
    listed = set()
    for f in (meta.iterdir() if meta.exists() else ()):
        if f.name.isdigit():
            listed |= {Path(json.loads(line)["path"]).name for line in f.read_text().splitlines()[1:]}
    return {f.name for f in out.glob("*.parquet")} - listed if out.exists() else set()


def in_flight(checkpoint: Path, out: Path) -> int | None:
    """A batch past the first that the query has planned (offsets/N), not committed
    (commits/N), and of which some tasks have written their files."""
    pending = logged(checkpoint, "offsets") - logged(checkpoint, "commits")
    if pending and max(pending) >= 1 and uncommitted_files(out):
        return max(pending)
    return None


def offsets(checkpoint: Path, batch: int) -> dict[str, int]:
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])


def check_output(spark, out: Path, checkpoint: Path, expected: set[str]) -> None:
    """Every message once (read through Spark: orphan files of killed tasks left out), and each
    batch's files hold exactly the range its offsets say."""
    rows = spark.read.parquet(str(out)).select("seq", "body").collect()
    got = [r.body.decode() for r in rows]
    assert len(got) == len(set(got)) and set(got) == expected
    first = min(r.seq for r in rows)  # the queue's first message: where the query started
    for b in sorted(logged(checkpoint, "commits")):
        files = [json.loads(line)["path"] for line in (out / "_spark_metadata" / str(b)).read_text().splitlines()[1:]]
        seqs = sorted(s for f in files for s in pq.read_table(f.removeprefix("file://"), columns=["seq"])["seq"].to_pylist())
        hi = offsets(checkpoint, b)
        lo = offsets(checkpoint, b - 1) if b else {k: first for k in hi}
        assert seqs == [s for k in sorted(hi) for s in range(lo[k], hi[k])], f"batch {b}"


def test_the_query_killed_mid_batch_and_run_again_from_its_checkpoint_writes_every_message_once(
        spark, broker_factory, tmp_path):
    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    out, ck = tmp_path / "out", tmp_path / "ck"
    with Connection(url) as conn, TcpProxy("127.0.0.1", broker.port) as proxy:
        expected = send(conn, "crash.q", COUNT)
        log = open(tmp_path / "job.log", "wb")
        job = subprocess.Popen([sys.executable, str(HERE / "source_job.py"), f"tcp://127.0.0.1:{proxy.port}",
                                "crash.q", str(out), str(ck), str(tmp_path / "scratch"),
                                *(f"{k}={v}" for k, v in OPTIONS.items())],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                batch = wait_for(lambda: in_flight(ck, out) or job.poll() is not None, 120, 0.005,
                                 "the query planned no batch")
                assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
                proxy.freeze()  # nothing more reaches the broker or comes back
                time.sleep(0.5)
                if batch not in logged(ck, "commits"):
                    break  # frozen mid-batch
                proxy.heal()
            os.killpg(job.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
            job.wait(30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
            log.close()
        assert batch in logged(ck, "offsets") and batch not in logged(ck, "commits")
        assert batch < 4 and uncommitted_files(out)  # there was more to do; orphan files of the batch
        run(spark, url, "crash.q", str(out), str(ck), **OPTIONS)  # the same checkpoint, this process
        assert max(logged(ck, "commits")) >= 4
        check_output(spark, out, ck, expected)
        assert conn.queue_info("crash.q")["message_count"] > 0  # the cursor trails by a batch


def test_the_broker_killed_mid_batch_and_restarted_the_query_goes_on_and_writes_every_message_once(
        spark, broker_factory, tmp_path):
    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    out, ck = tmp_path / "out", tmp_path / "ck"
    with Connection(url) as conn:
        expected = send(conn, "bounce.q", COUNT)
    reader = spark.readStream.format("petrel").option("brokers", url).option("queues", "bounce.q")
    for k, v in OPTIONS.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    try:
        batch = wait_for(lambda: in_flight(ck, out) or not query.isActive, 120, 0.002, "the query planned no batch")
        assert query.isActive
        broker.kill9()
        assert batch not in logged(ck, "commits")
        orphans = uncommitted_files(out)
        time.sleep(1)
        broker.start()  # the same data directory and port
        query.awaitTermination(120)
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None
    assert max(logged(ck, "commits")) >= 4
    check_output(spark, out, ck, expected)
    assert orphans  # some tasks of the batch had written their files when the broker died


def test_the_live_of_a_replicated_pair_killed_mid_batch_the_query_goes_on_with_its_backup(spark, tmp_path):
    """The source reaches the pair through the live's URL only; the topology names the backup,
    which serves the same node ID and sequence numbers (and the cursor) after the failover."""
    p, b = make_pair(tmp_path, primary="lone_pair_failover = true\n", backup="lone_pair_failover = true\n")
    out, ck = tmp_path / "out", tmp_path / "ck"
    try:
        start_pair(p, b)
        with Connection(f"tcp://127.0.0.1:{p.port}") as conn:
            expected = send(conn, "ha.q", COUNT)
        reader = (spark.readStream.format("petrel").option("brokers", f"tcp://127.0.0.1:{p.port}")
                  .option("queues", "ha.q"))
        for k, v in OPTIONS.items():
            reader = reader.option(k, v)
        query = (reader.load().writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        try:
            batch = wait_for(lambda: in_flight(ck, out) or not query.isActive, 120, 0.002, "no batch planned")
            assert query.isActive
            p.kill9()
            assert batch not in logged(ck, "commits")
            b.wait_state("ok", timeout=30)
            query.awaitTermination(120)
        finally:
            if query.isActive:
                query.stop()
        assert query.exception() is None
        assert max(logged(ck, "commits")) >= 4
        check_output(spark, out, ck, expected)
    finally:
        stop_all(p, b)
