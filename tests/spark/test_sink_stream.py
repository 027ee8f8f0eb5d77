"""df.writeStream.format("petrel"): a query killed with kill -9 in the middle of a batch, then
run again from its checkpoint, leaves every row exactly once on the broker (the replayed
batch's rows the broker already had are dropped as duplicates, and counted so).

The query process publishes through a TCP proxy; as soon as the broker holds part of the
first batch the proxy freezes (nothing more reaches the broker), so the kill lands mid-batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from petrel.client import Connection
from petrel.testing.process import wait_for
from petrel.testing.proxy import TcpProxy

pytestmark = pytest.mark.spark

HERE = Path(__file__).resolve().parent
FILES, PER_FILE = 3, 400


def count(conn: Connection) -> int:
    info = conn.queue_info("spark.stream")
    return 0 if info is None else info["message_count"]


def write_source(directory: Path) -> set[str]:
    directory.mkdir()
    bodies = set()
    for f in range(FILES):
        lines = []
        for i in range(PER_FILE):
            body = f"f{f}-{i}"
            bodies.add(body)
            lines.append(json.dumps({"id": i % 10, "body": body}))
        (directory / f"part-{f}.json").write_text("\n".join(lines) + "\n")
    return bodies


def test_a_query_killed_mid_batch_and_restarted_publishes_every_row_once(spark, broker_factory, tmp_path):
    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    bodies = write_source(tmp_path / "in")
    checkpoint, stats = tmp_path / "checkpoint", tmp_path / "stats.jsonl"
    log = open(tmp_path / "job.log", "wb")
    with Connection(url) as conn, TcpProxy("127.0.0.1", broker.port) as proxy:
        job = subprocess.Popen([sys.executable, str(HERE / "stream_job.py"), str(tmp_path / "in"), str(checkpoint),
                                f"tcp://127.0.0.1:{proxy.port}", str(stats), str(tmp_path / "job-scratch")],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: count(conn) > 0 or job.poll() is not None, 120, 0.002, "the job published nothing")
            proxy.freeze()
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            seen = [count(conn)]

            def settled() -> bool:  # what was on its way has arrived
                time.sleep(0.5)
                seen.append(count(conn))
                return seen[-1] == seen[-2]

            wait_for(settled, 30, 0, "the published count kept growing")
            before = seen[-1]
            os.killpg(job.pid, signal.SIGKILL)  # the Python driver, its JVM and its workers
            job.wait(30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
            log.close()
        assert 0 < before < PER_FILE
        assert (checkpoint / "offsets" / "0").exists() and not (checkpoint / "commits" / "0").exists()
        assert not stats.exists()  # batch 0 never committed

        sys.path.insert(0, str(HERE))
        from stream_job import run

        run(spark, str(tmp_path / "in"), str(checkpoint), url, str(stats))  # the same checkpoint, this process
        assert count(conn) == FILES * PER_FILE
        got = [m.body.decode() for m in conn.session().browser("spark.stream", batch=500)]
    assert len(got) == len(set(got)) and set(got) == bodies
    lines = [json.loads(line) for line in stats.read_text().splitlines()]
    assert [line["batch"] for line in lines] == [0, 1, 2]
    assert lines[0]["duplicates"] == before and lines[0]["published"] == PER_FILE - before
    assert all(line["duplicates"] == 0 and line["published"] == PER_FILE for line in lines[1:])
