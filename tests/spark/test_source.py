"""readStream.format("petrel") against a real broker process: a queue into Parquet with a
checkpoint and Trigger.AvailableNow (every message once, run again: nothing more),
maxMessagesPerBatch split fairly across queues, the startingOffsets variants, wildcard
queues, failOnDataLoss, the subscription cursor that commits move, and the batch read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from petrel.client import Connection, Message

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from source_job import run  # noqa: E402


def send(conn: Connection, queue: str, n: int, start: int = 0) -> None:
    with conn.session() as session:
        producer = session.producer(f"queue://{queue}")
        for i in range(start, start + n):
            producer.send(Message(f"{queue}-{i}".encode(), {"i": i, "flag": i % 2 == 0}, priority=i % 10,
                                  duplicate_id=f"{queue}-{i}"))
        session.flush()


def bodies(queue: str, lo: int, hi: int) -> list[str]:
    return [f"{queue}-{i}" for i in range(lo, hi)]


def output(spark, path: Path) -> list:
    """What the query wrote, read through Spark (its _spark_metadata leaves out orphan files)."""
    if not path.exists():
        return []
    return spark.read.parquet(str(path)).collect()


def batches(checkpoint: Path) -> list[dict]:
    """The source offsets the query logged, batch by batch."""
    out = []
    for f in sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name)):
        out.append(json.loads(f.read_text().splitlines()[-1]))
    return out


@pytest.fixture
def broker(broker_factory):
    b = broker_factory().start()
    b.url = f"tcp://127.0.0.1:{b.port}"
    return b


def test_a_queue_into_parquet_exactly_once_with_available_now(spark, broker, tmp_path):
    out, ck = tmp_path / "out", tmp_path / "ck"
    with Connection(broker.url) as conn:
        conn.create_queue("src.one")
        send(conn, "src.one", 250)
        run(spark, broker.url, "src.one", str(out), str(ck), messagesPerPartition="100")
        rows = output(spark, out)
        assert sorted(r.body.decode() for r in rows) == sorted(bodies("src.one", 0, 250))
        r = min(rows, key=lambda r: r.seq)
        assert r.node == conn.node_id and r.queue == "src.one" and r.dup_id == "src.one-0"
        assert r.properties == {"i": "0", "flag": "true"} and r.priority == 0 and r.timestamp > 1.7e12
        assert len({r.seq for r in rows}) == 250
        # again from the checkpoint: nothing new, nothing twice; then only what came since
        run(spark, broker.url, "src.one", str(out), str(ck))
        assert len(output(spark, out)) == 250
        send(conn, "src.one", 50, start=250)
        run(spark, broker.url, "src.one", str(out), str(ck))
        rows = output(spark, out)
        assert sorted(r.body.decode() for r in rows) == sorted(bodies("src.one", 0, 300))
        # the cursor was created and moved by commits; the broker still holds the last batch
        cursor = conn.cursor("src.one", "spark")
        seqs = conn.queue_seqs("src.one")
        assert seqs.earliest_seq <= cursor.acked <= seqs.tail_seq
        assert conn.queue_info("src.one")["message_count"] == seqs.tail_seq - cursor.acked
