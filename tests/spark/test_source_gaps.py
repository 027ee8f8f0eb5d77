"""A limited query (maxMessagesPerBatch) over the gap a broker restart leaves in a queue's
sequence numbers: a restart skips the rest of the queue's reservation (10,000 numbers), which
hold no message. The budget counts from the first number that holds one, so the query crosses
the gap in one batch, not in one empty batch per maxMessagesPerBatch numbers (found by the chaos
harness's spark topology: 20 empty batches after each broker restart with a limit of 500)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from petrel.client import Connection, Message

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from source_job import run  # noqa: E402


def send(url: str, first: int, n: int) -> None:
    with Connection(url) as conn:
        conn.create_queue("gaps", exists_ok=True)
        with conn.session() as session:
            producer = session.producer("queue://gaps")
            for i in range(first, first + n):
                producer.send(Message(f"m{i}".encode(), durable=True))
            session.flush()


def test_a_limited_query_crosses_the_sequence_gap_of_a_broker_restart_in_one_batch(spark, broker_factory, tmp_path):
    b = broker_factory().start()
    url = f"tcp://127.0.0.1:{b.port}"
    send(url, 0, 30)
    b.restart()
    send(url, 30, 30)
    with Connection(url) as conn:
        seqs = conn.queue_seqs("gaps")
    assert seqs.tail_seq > 1000  # the gap is there
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = run(spark, url, "gaps", str(out), str(checkpoint), maxMessagesPerBatch="500", startingOffsets="earliest")
    batches = [p for p in query.recentProgress if p.numInputRows]
    rows = spark.read.parquet(str(out)).selectExpr("CAST(body AS STRING) AS b").collect()
    assert sorted(r.b for r in rows) == sorted(f"m{i}" for i in range(60))
    assert len(query.recentProgress) <= 3, [p.numInputRows for p in query.recentProgress]
    assert sum(p.numInputRows for p in batches) == 60
