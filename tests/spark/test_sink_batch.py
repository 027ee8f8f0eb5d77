"""df.write.format("petrel") into a real broker: every row once, fields carried, a re-run of
the same write (same writeId) publishes nothing twice, and a clear error for bad input."""

from __future__ import annotations

import json
import time

import pytest

from petrel.client import Connection

pytestmark = pytest.mark.spark


def count(url: str, queue: str) -> int:
    with Connection(url) as conn:
        info = conn.queue_info(queue)
        return 0 if info is None else info["message_count"]


def browse_all(url: str, queue: str) -> list:
    with Connection(url) as conn:
        return list(conn.session().browser(queue, batch=500))


def test_batch_write_publishes_each_row_once_and_a_rerun_nothing(spark, broker_factory, tmp_path):
    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    stats = tmp_path / "stats.jsonl"
    df = spark.sql(
        "SELECT concat('m-', id) AS body, map('n', cast(id AS string)) AS properties, "
        "cast(id % 10 AS int) AS priority FROM range(0, 1200, 1, 2)")

    def write():
        (df.write.format("petrel").mode("append").option("brokers", url).option("address", "queue://spark.batch")
         .option("writeId", "nightly-2026-11-24").option("chunkSize", "100").option("statsFile", str(stats)).save())

    write()
    assert count(url, "spark.batch") == 1200
    write()  # the same write again: every row's duplicate ID is known to the broker
    assert count(url, "spark.batch") == 1200
    first, second = [json.loads(line) for line in stats.read_text().splitlines()]
    assert (first["published"], first["duplicates"], first["tasks"]) == (1200, 0, 2)
    assert (second["published"], second["duplicates"]) == (0, 1200)
    messages = browse_all(url, "spark.batch")
    assert sorted(m.body for m in messages) == sorted(f"m-{i}".encode() for i in range(1200))
    one = next(m for m in messages if m.body == b"m-17")
    assert one.priority == 7 and one.properties["n"] == "17"
    assert one.duplicate_id == "nightly-2026-11-24:0:17"  # partition 0, row 17


def test_batch_write_with_a_dup_id_column_and_an_address_column(spark, broker_factory):
    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    rows = [(f"order-{i}", f"queue://spark.{'even' if i % 2 == 0 else 'odd'}", bytes([i])) for i in range(10)]
    for batch in (rows, rows[:4] + [(None, "queue://spark.odd", b"no id")]):
        df = spark.createDataFrame(batch, "order_id string, address string, body binary")
        df.write.format("petrel").mode("append").option("brokers", url).option("dupIdColumn", "order_id").save()
    # the 4 repeated rows dropped; the row without an ID gets one of its write's own
    assert (count(url, "spark.even"), count(url, "spark.odd")) == (5, 6)
    assert {m.duplicate_id for m in browse_all(url, "spark.even")} == {f"order-{i}" for i in range(0, 10, 2)}


def test_bad_input_fails_with_a_clear_message(spark):
    df = spark.createDataFrame([(1,)], "payload int")
    with pytest.raises(Exception, match="the rows need a 'body' column"):
        df.write.format("petrel").mode("append").option("address", "queue://x").save()


def test_a_cut_connection_mid_write_is_retried_without_duplicates(spark, broker_factory, tmp_path):
    from petrel.testing.process import wait_for
    from petrel.testing.proxy import TcpProxy

    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    stats = tmp_path / "stats.jsonl"
    df = spark.sql("SELECT concat('c-', id) AS body FROM range(0, 3000, 1, 2)")
    with Connection(url) as conn, TcpProxy("127.0.0.1", broker.port) as proxy:
        import threading

        def cut_once() -> None:
            wait_for(lambda: (conn.queue_info("spark.cut") or {}).get("message_count", 0) > 300, 120, 0.005)
            proxy.cut()  # every link reset mid-write; new ones refused for a moment
            time.sleep(0.5)
            proxy.heal()

        cutter = threading.Thread(target=cut_once)
        cutter.start()
        (df.write.format("petrel").mode("append").option("brokers", f"tcp://127.0.0.1:{proxy.port}")
         .option("address", "queue://spark.cut").option("chunkSize", "20").option("statsFile", str(stats)).save())
        cutter.join(30)
        assert conn.queue_info("spark.cut")["message_count"] == 3000
    line = json.loads(stats.read_text())
    assert line["retries"] > 0 and line["published"] + line["duplicates"] == 3000
    assert sorted(m.body for m in browse_all(url, "spark.cut")) == sorted(f"c-{i}".encode() for i in range(3000))


def test_a_broker_killed_mid_write_behind_a_failover_url_loses_and_duplicates_nothing(spark, broker_factory,
                                                                                       tmp_path):
    import threading

    from petrel.testing.process import wait_for

    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    failover = f"failover:(tcp://127.0.0.1:{broker.port})?initialReconnectDelay=100&maxReconnectDelay=500"
    stats = tmp_path / "stats.jsonl"
    df = spark.sql("SELECT concat('k-', id) AS body FROM range(0, 3000, 1, 2)")

    def crash() -> None:
        def published() -> int:
            try:
                with Connection(url) as conn:
                    return (conn.queue_info("spark.crash") or {}).get("message_count", 0)
            except Exception:
                return 0

        wait_for(lambda: published() > 300, 120, 0.01)
        broker.kill9()  # transactions in flight are lost; committed ones are on disk with their IDs
        time.sleep(1.0)
        broker.start()

    crasher = threading.Thread(target=crash)
    crasher.start()
    (df.write.format("petrel").mode("append").option("brokers", failover).option("address", "queue://spark.crash")
     .option("chunkSize", "20").option("statsFile", str(stats)).save())
    crasher.join(60)
    assert sorted(m.body for m in browse_all(url, "spark.crash")) == sorted(f"k-{i}".encode() for i in range(3000))
    line = json.loads(stats.read_text())
    assert line["retries"] > 0 and line["published"] + line["duplicates"] == 3000


def test_one_dup_id_in_two_concurrent_tasks_is_published_once(spark, broker_factory):
    broker = broker_factory().start()
    url = f"tcp://127.0.0.1:{broker.port}"
    rows = [(f"id-{i}", b"%d" % i) for i in range(10)]
    df = spark.createDataFrame(rows + rows, "id string, body binary")  # halves: partition 0 and 1 hold the same IDs
    assert df.rdd.getNumPartitions() == 2
    df.write.format("petrel").mode("append").option("brokers", url).option("address", "queue://spark.twice") \
        .option("dupIdColumn", "id").option("chunkSize", "10").save()
    assert count(url, "spark.twice") == 10
