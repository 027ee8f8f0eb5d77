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
from petrel.testing.process import wait_for

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
    meta = path / "_spark_metadata"
    if not meta.exists() or not any(p.name.isdigit() for p in meta.iterdir()):
        return []  # no batch committed
    return spark.read.parquet(str(path)).collect()


def batches(checkpoint: Path) -> list[dict]:
    """The source offsets the query logged, batch by batch."""
    out = []
    for f in sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
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


def test_max_messages_per_batch_is_split_fairly_across_queues_matched_by_a_wildcard(spark, broker, tmp_path):
    out, ck = tmp_path / "out", tmp_path / "ck"
    with Connection(broker.url) as conn:
        for q in ("fair.busy", "fair.quiet", "other"):
            conn.create_queue(q)
        send(conn, "fair.busy", 300)
        send(conn, "fair.quiet", 30)
        send(conn, "other", 5)
        base = {q: conn.queue_seqs(q).earliest_seq for q in ("fair.busy", "fair.quiet")}
        node = conn.node_id
        run(spark, broker.url, "fair.*", str(out), str(ck), maxMessagesPerBatch="60", subscription="fair")
        rows = output(spark, out)
    assert sorted(r.body.decode() for r in rows) == sorted(bodies("fair.busy", 0, 300) + bodies("fair.quiet", 0, 30))
    logged = batches(ck)
    keys = [f"{node}/fair.busy", f"{node}/fair.quiet"]
    assert all(list(b) == keys for b in logged)  # sorted keys, only the matched queues
    steps = [{q: b[f"{node}/{q}"] - base[q] for q in base} for b in logged]
    assert steps[0] == {"fair.busy": 30, "fair.quiet": 30}  # equal shares, not first come first served
    assert steps[1] == {"fair.busy": 90, "fair.quiet": 30}  # the quiet queue's share goes to the busy one
    assert steps[-1] == {"fair.busy": 300, "fair.quiet": 30}
    assert len(logged) == 6 and all(sum(b.values()) - sum(a.values()) <= 60 for a, b in zip(logged, logged[1:]))


def test_starting_offsets_earliest_latest_json_and_acked(spark, broker, tmp_path):
    with Connection(broker.url) as conn:
        conn.create_queue("start.q")
        send(conn, "start.q", 40)
        first = conn.queue_seqs("start.q").earliest_seq
        node = conn.node_id

        def query(name: str, **options) -> list[str]:
            run(spark, broker.url, "start.q", str(tmp_path / name), str(tmp_path / f"{name}.ck"),
                subscription=name, **options)
            return sorted(r.body.decode() for r in output(spark, tmp_path / name))

        conn.create_cursor("start.q", "keep")  # holds everything for the other subscriptions
        conn.ack_upto("start.q", "acked", first + 24)  # this subscription has read 25 already
        assert query("acked") == sorted(bodies("start.q", 25, 40))
        assert query("earliest", startingOffsets="earliest") == sorted(bodies("start.q", 0, 40))
        assert query("latest", startingOffsets="latest") == []
        assert query("byqueue", startingOffsets=json.dumps({"start.q": first + 30})) == sorted(bodies("start.q", 30, 40))
        assert query("bykey", startingOffsets=json.dumps({f"{node}/start.q": first + 38})) == bodies("start.q", 38, 40)
        assert query("minus2", startingOffsets=json.dumps({"start.q": -2})) == sorted(bodies("start.q", 0, 40))
        send(conn, "start.q", 5, start=40)  # a started query goes on from its checkpoint, whatever the option
        assert query("latest", startingOffsets="latest") == bodies("start.q", 40, 45)
        assert query("acked") == sorted(bodies("start.q", 25, 45))
        with pytest.raises(Exception, match="option startingOffsets"):
            query("bad", startingOffsets="yesterday")


def test_fail_on_data_loss_fails_a_batch_whose_messages_were_removed_and_false_skips_them(spark, broker, tmp_path):
    with Connection(broker.url) as conn:
        conn.create_queue("loss.q")
        send(conn, "loss.q", 30)
        first = conn.queue_seqs("loss.q").earliest_seq
        start = json.dumps({"loss.q": first})
        conn.ack_upto("loss.q", "lossy", first + 9)  # the only cursor: the first 10 are removed
        assert conn.queue_seqs("loss.q").earliest_seq == first + 10
        with pytest.raises(Exception, match=rf"data loss: the broker has removed sequence numbers \[{first}, {first + 10}\)"):
            run(spark, broker.url, "loss.q", str(tmp_path / "a"), str(tmp_path / "a.ck"), subscription="lossy",
                startingOffsets=start)
        assert output(spark, tmp_path / "a") == []
        run(spark, broker.url, "loss.q", str(tmp_path / "b"), str(tmp_path / "b.ck"), subscription="lossy",
            startingOffsets=start, failOnDataLoss="false")
        assert sorted(r.body.decode() for r in output(spark, tmp_path / "b")) == sorted(bodies("loss.q", 10, 30))
        # taken by an ordinary consumer is no loss: a gap, the same on every read
        with conn.session() as session:
            consumer = session.consumer("queue://loss.q", window=0)
            taken = []
            for _ in range(3):
                m = consumer.receive(10)
                m.ack()
                taken.append(m.body.decode())
            consumer.close()
        wait_for(lambda: conn.queue_info("loss.q")["messages_acked"] >= 3, 10)
        run(spark, broker.url, "loss.q", str(tmp_path / "c"), str(tmp_path / "c.ck"), subscription="gaps",
            startingOffsets=json.dumps({"loss.q": first + 10}))
        assert sorted(r.body.decode() for r in output(spark, tmp_path / "c")) == sorted(set(bodies("loss.q", 10, 30)) - set(taken))
        # the queue deleted and made again: its sequence numbers start over below the checkpoint's
        conn.delete_queue("loss.q")
        conn.create_queue("loss.q")
        send(conn, "loss.q", 5, start=100)
        with pytest.raises(Exception, match="data loss: queue loss.q .* deleted and created again"):
            run(spark, broker.url, "loss.q", str(tmp_path / "c"), str(tmp_path / "c.ck"), subscription="gaps")
        run(spark, broker.url, "loss.q", str(tmp_path / "b"), str(tmp_path / "b.ck"), subscription="lossy",
            failOnDataLoss="false")
        assert sorted(r.body.decode() for r in output(spark, tmp_path / "b")) == sorted(
            bodies("loss.q", 10, 30) + bodies("loss.q", 100, 105))


def test_a_batch_read_of_a_range(spark, broker):
    with Connection(broker.url) as conn:
        conn.create_queue("batch.a")
        conn.create_queue("batch.b")
        send(conn, "batch.a", 30)
        send(conn, "batch.b", 10)
        first = conn.queue_seqs("batch.a").earliest_seq
        df = spark.read.format("petrel").option("brokers", broker.url).option("queues", "batch.a,batch.b").load()
        assert df.count() == 40
        part = (spark.read.format("petrel").option("brokers", broker.url).option("queues", "batch.a")
                .option("startingOffsets", json.dumps({"batch.a": first + 5}))
                .option("endingOffsets", json.dumps({"batch.a": first + 15})).option("messagesPerPartition", "3")
                .load())
        assert part.rdd.getNumPartitions() == 4
        assert [r.body.decode() for r in part.orderBy("seq").collect()] == bodies("batch.a", 5, 15)
        assert conn.cursors("batch.a") == []  # a batch read moves nothing
        with pytest.raises(Exception, match="the schema is node, queue, seq"):
            spark.read.format("petrel").schema("body binary").option("queues", "batch.a").load().collect()


def test_a_running_query_reads_new_messages_and_a_queue_that_appears_under_its_wildcard(spark, broker, tmp_path):
    out, ck = tmp_path / "out", tmp_path / "ck"
    with Connection(broker.url) as conn:
        conn.create_queue("join.a")
        send(conn, "join.a", 10)
        query = (spark.readStream.format("petrel").option("brokers", broker.url).option("queues", "join.#")
                 .load().writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(ck)).start())
        try:
            query.processAllAvailable()
            send(conn, "join.a", 5, start=10)
            conn.create_queue("join.b.late")
            send(conn, "join.b.late", 7)
            wait_for(lambda: query.processAllAvailable() or len(output(spark, out)) == 22, 60, 0.1,
                     "the new queue was not read")
        finally:
            query.stop()
        rows = output(spark, out)
        assert sorted(r.body.decode() for r in rows) == sorted(bodies("join.a", 0, 15) + bodies("join.b.late", 0, 7))
        assert conn.cursor("join.b.late", "spark").acked >= conn.queue_seqs("join.b.late").earliest_seq
