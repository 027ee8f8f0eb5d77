"""The audit stream and ``petrel spark reconcile``: a message acknowledged behind the audit's
back is lost, a message injected twice (its duplicate ID consumed twice) is duplicated, what
the journal still holds is held (also what a Spark query read, audited with consumed_events);
the table is printed and written."""

from __future__ import annotations

import asyncio
import csv

import pytest
from click.testing import CliRunner

from petrel.cli import main
from petrel.client import Message, connect
from petrel.spark.audit import AuditWriter, consumed_events, read_audit
from petrel.spark.reconcile import reconcile

pytestmark = pytest.mark.spark

SETTINGS = '[address_settings."audit.twice"]\nid_cache_size = 0\n'  # no duplicate detection there


def run(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_reconcile_finds_a_lost_and_a_duplicated_message(spark, broker_factory, tmp_path):
    broker = broker_factory(SETTINGS, name="b").start()
    url = f"tcp://127.0.0.1:{broker.port}"
    audit = tmp_path / "audit"

    async def traffic() -> None:
        async with await connect(url) as conn:
            session = await conn.session()
            with AuditWriter(audit / "producer", source="producer") as produced:
                for queue, n in (("queue://audit.orders", 10), ("queue://audit.twice", 3), ("queue://audit.lake", 2)):
                    producer = session.producer(queue)
                    for i in range(n):
                        message = Message(b"%d" % i, duplicate_id=f"{queue[8:]}-{i}")
                        await producer.send(message)
                        produced.produced(queue, message, node=conn.node_id)
                # injected: audit.twice-0 once more, by someone who does not audit
                await session.producer("queue://audit.twice").send(Message(b"0", duplicate_id="audit.twice-0"))
                await session.flush()
            with AuditWriter(audit / "consumer", source="consumer", flush_every=4) as consumed:
                orders = await session.consumer("queue://audit.orders")
                for _ in range(6):
                    m = await orders.receive(5)
                    await orders.ack(m)
                    consumed.consumed("audit.orders", m, node=conn.node_id)
                await orders.close()
                twice = await session.consumer("queue://audit.twice")
                while (m := await twice.receive(1)) is not None:
                    await twice.ack(m)
                    consumed.consumed("audit.twice", m, node=conn.node_id)
            rogue = await session.consumer("queue://audit.orders")  # behind the audit's back
            m = await rogue.receive(5)
            await rogue.ack(m)
            await session.flush()

    run(traffic())
    # a streaming query reads audit.lake without consuming it, its reads audited by the Spark side
    lake = (spark.readStream.format("petrel").option("brokers", url).option("queues", "audit.lake")
            .option("subscription", "audit").load())
    (consumed_events(lake).writeStream.format("parquet").option("path", str(audit / "lake"))
     .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start().awaitTermination(120))
    assert (audit / "lake" / "_spark_metadata").is_dir()
    broker.stop()
    assert read_audit(spark, str(audit)).count() == 13 + 6 + 4 + 2 + 2

    rows = {r.queue: r.asDict() for r in reconcile(spark, str(audit), [str(broker.data_dir)]).collect()}
    orders, twice = rows["audit.orders"], rows["audit.twice"]
    assert {k: orders[k] for k in ("produced", "consumed", "duplicated", "lost", "held", "held_total")} == \
        {"produced": 10, "consumed": 6, "duplicated": 0, "lost": 1, "held": 3, "held_total": 3}
    assert orders["lost_ids"] == ["audit.orders-6"]  # the rogue consumer took the seventh
    assert {k: twice[k] for k in ("produced", "consumed", "duplicated", "lost", "held")} == \
        {"produced": 3, "consumed": 3, "duplicated": 1, "lost": 0, "held": 0}
    assert twice["duplicated_ids"] == ["audit.twice-0"]
    assert {k: rows["audit.lake"][k] for k in ("produced", "consumed", "lost", "held")} == \
        {"produced": 2, "consumed": 2, "lost": 0, "held": 2}  # read, not taken

    # a window that ends before anything was produced: nothing to follow, only what queues hold
    early = {r.queue: (r.produced, r.consumed, r.lost, r.held_total)
             for r in reconcile(spark, str(audit), [str(broker.data_dir)], until=1).collect()}
    assert early == {"audit.orders": (0, 0, 0, 3), "audit.lake": (0, 0, 0, 2)}

    # a migration: the messages produced to that node only
    node = read_audit(spark, str(audit)).where("event = 'produced'").first().node
    assert {r.queue: r.produced for r in reconcile(spark, str(audit), migration=node).collect()} == \
        {"audit.orders": 10, "audit.twice": 3, "audit.lake": 2}
    assert reconcile(spark, str(audit), migration="another-node").count() == 0

    out = tmp_path / "report.csv"
    result = CliRunner().invoke(main, ["spark", "reconcile", "--audit", str(audit), "--data-dir", str(broker.data_dir),
                                       "--out", str(out)])
    assert result.exit_code == 1, result.output  # something was lost or duplicated
    assert "audit.orders" in result.output and "lost, e.g. audit.orders-6" in result.output
    with open(out) as f:
        table = {r["queue"]: r for r in csv.DictReader(f)}
    assert table["audit.orders"]["lost"] == "1" and table["audit.twice"]["duplicated"] == "1"


def test_audit_writer_files_and_times(tmp_path):
    from petrel.cli.spark import _epoch_ms

    with AuditWriter(tmp_path, source="t", flush_every=2) as audit:
        with pytest.raises(ValueError, match="stamp"):
            audit.produced("queue://q", Message(b"x"))  # the client would put another ID on the wire
        m = Message(b"x")
        dup = audit.stamp(m)
        assert audit.stamp(m) == dup == m.properties["_AMQ_DUPL_ID"]
        audit.produced("queue://q", m)
        audit.consumed("q", dup_id=dup, seq=1)  # the second event: a file
        assert len(list(tmp_path.glob("audit-*.parquet"))) == 1 and not list(tmp_path.glob(".*"))
        audit.consumed("q", dup_id=dup, seq=2)
    import pyarrow.parquet as pq

    events = pq.read_table(tmp_path).to_pylist()
    assert [(e["event"], e["queue"], e["dup_id"], e["seq"]) for e in events] == [
        ("produced", "q", dup, None), ("consumed", "q", dup, 1), ("consumed", "q", dup, 2)]
    assert _epoch_ms(None, None, "1970-01-01T00:00:01") == 1000
    assert _epoch_ms(None, None, "1500") == 1500
