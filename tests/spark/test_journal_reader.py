"""spark.read.format("petrel-journal") on a real broker's data directory, with a compacted
journal, page files, large messages, transactions (one rolled back) and a torn tail:

* the raw records agree with ``petrel data print`` (records per segment, messages per queue);
* the torn tail is an error row, not a failure;
* the resolved view's messages per queue are what the broker holds after it restarts on the
  same directory (recovery), large bodies included;
* two data directories read together.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from petrel.client import Connection, Message
from petrel.spark import read_journal
from petrel.spark.journal import data_directories, journal_files
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.spark

SETTINGS = """
min_large_message_size = 8192
journal_file_size = 65536
journal_compact_min_files = 2
journal_compact_percentage = 90

[address_settings."paged.#"]
max_size_bytes = 32768
page_size_bytes = 16384
"""
LARGE = [bytes([65 + i]) * (20000 + i) for i in range(3)]
HELD = {"orders": 200, "orders.tx": 20, "paged.q": 250, "big": 3}


def consume(conn: Connection, queue: str, n: int) -> None:
    """Take ``n`` messages in one transaction and commit (the acks are durable after)."""
    session = conn.session(transacted=True)
    consumer = session.consumer(f"queue://{queue}", window=0)  # no prefetch: the rest stays paged
    for _ in range(n):
        assert consumer.receive(timeout=10) is not None
    session.commit()
    consumer.close()
    session.close()


def send(conn: Connection, queue: str, bodies) -> None:
    session = conn.session()
    producer = session.producer(f"queue://{queue}")
    for body in bodies:
        producer.send(Message(body))
    session.flush()
    session.close()


def tear_tail(data_dir: Path) -> tuple[str, int]:
    """Make the newest message segment end in a torn record (a copy of its first record with
    a flipped last byte, right after its data), as a crash in the middle of a write leaves."""
    from petrel.storage.journal.recovery import scan
    from petrel.storage.journal.segment import Layout

    files = Layout(data_dir / "journal", "petrel-data", "pj").data_files()
    seg, path = max(files.items())
    buf = bytearray(path.read_bytes())
    result = scan(buf, seg)
    first = next(r for r in result.records if r[1] != 20)  # not a MARK
    record = bytearray(buf[first[0]:first[0] + first[7]])
    record[-1] ^= 0xFF
    buf[result.end:result.end + len(record)] = record
    path.write_bytes(bytes(buf))
    return f"journal/{path.name}", result.end


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A killed broker's data directory (module-wide; tests that start a broker copy it)."""
    root = tmp_path_factory.mktemp("journal")
    broker = BrokerProcess(root / "b", settings=SETTINGS).start()
    try:
        url = f"tcp://127.0.0.1:{broker.port}"
        with Connection(url) as conn:
            for r in range(6):  # segments of kept orders among consumed churn: compaction
                send(conn, "orders", [f"order-{i}".encode() + b"." * 300 for i in range(r * 50, r * 50 + 50)])
                send(conn, "churn", [b"c" * 900] * 150)
                consume(conn, "churn", 150)
            consume(conn, "orders", 100)
            wait_for(lambda: "compacted " in broker.log(), 60, 0.2, f"no compaction:\n{broker.log()}")
            tx = conn.session(transacted=True)
            producer = tx.producer("queue://orders.tx")
            for i in range(20):
                producer.send(Message(f"tx-{i}".encode()))
            tx.commit()
            for i in range(5):
                producer.send(Message(f"rolled-back-{i}".encode()))
            tx.rollback()
            send(conn, "paged.q", [f"paged-{i}".encode() + b"p" * 1000 for i in range(300)])
            consume(conn, "paged.q", 50)
            send(conn, "big", LARGE)
        assert list((broker.data_dir / "paging").glob("*/*.page")), "nothing was paged"
        assert list((broker.data_dir / "large-messages").glob("*.msg"))
    finally:
        broker.kill9()
    torn = tear_tail(broker.data_dir)
    return broker.data_dir, torn


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("small") / "b").start()
    try:
        with Connection(f"tcp://127.0.0.1:{broker.port}") as conn:
            send(conn, "other", [b"x%d" % i for i in range(5)])
    finally:
        broker.kill9()
    return broker.data_dir


def data_print(directory: Path) -> tuple[dict[str, int], dict[str, int]]:
    """`petrel data print`: records per segment file, messages per queue name."""
    out = subprocess.run([sys.executable, "-m", "petrel", "data", "print", str(directory)], capture_output=True,
                         text=True, timeout=120, env={"COLUMNS": "250", "PATH": ""})
    assert out.returncode == 0, out.stderr
    segments, queues = {}, {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 4 and cells[1].startswith("petrel-"):
            segments[cells[1]] = int(cells[2])
        elif len(cells) == 3 and "(" in cells[1]:
            queues[cells[1].split(" (")[0]] = int(cells[2])
    return segments, queues


def test_raw_records_agree_with_data_print_and_show_the_torn_tail(spark, data_dir):
    directory, (torn_file, torn_offset) = data_dir
    raw = read_journal(spark, str(directory))
    assert raw.rdd.getNumPartitions() == len(journal_files(directory))
    rows = raw.select("kind", "file", "offset", "record_type", "user_type", "error").collect()
    records = Counter(Path(r.file).name for r in rows if r.record_type is not None and r.kind != "page")
    segments, queues = data_print(directory)
    assert records == segments
    errors = [r for r in rows if r.record_type is None]
    assert [(r.file, r.offset) for r in errors] == [(torn_file, torn_offset)]
    assert "torn tail" in errors[0].error
    assert any(r.kind == "page" for r in rows) and not any(r.error for r in rows if r.record_type)

    resolved = read_journal(spark, str(directory), view="resolved")
    in_journal = Counter(r.queue for r in resolved.where("source = 'journal'").select("queue").collect())
    assert {q: n for q, n in in_journal.items()} == {q: n for q, n in queues.items() if n}


def test_resolved_view_holds_what_the_broker_recovers(spark, data_dir, tmp_path):
    directory, _ = data_dir
    resolved = read_journal(spark, str(directory), view="resolved").cache()
    held = Counter(r.queue for r in resolved.select("queue").collect())
    assert dict(held) == HELD
    assert resolved.where("source = 'page'").count() > 0
    big = sorted(bytes(r.body) for r in resolved.where("queue = 'big'").select("body").collect())
    assert big == sorted(LARGE)
    assert resolved.where("queue = 'orders.tx' AND cast(body AS string) LIKE 'rolled-back%'").count() == 0
    resolved.unpersist()

    copy = tmp_path / "data"
    shutil.copytree(directory, copy)
    broker = BrokerProcess(tmp_path / "b", settings=SETTINGS, data_dir=copy).start()
    try:
        with Connection(f"tcp://127.0.0.1:{broker.port}") as conn:
            assert {q: conn.queue_info(q)["message_count"] for q in HELD} == HELD
    finally:
        broker.kill9()


def test_two_data_directories_read_together(spark, data_dir, small_dir):
    directory, _ = data_dir
    both = f"{directory}, {small_dir.parent}"  # an instance directory holding data/ is fine too
    assert [str(d) for d in data_directories(both)] == [str(directory.resolve()), str(small_dir.resolve())]
    resolved = read_journal(spark, both, view="resolved", large_bodies=False)
    per_dir = Counter((r.data_dir, r.queue) for r in resolved.select("data_dir", "queue").collect())
    assert per_dir[(str(small_dir.resolve()), "other")] == 5
    assert sum(n for (d, _), n in per_dir.items() if d == str(directory.resolve())) == sum(HELD.values())
    nodes = {r.node for r in resolved.select("node").distinct().collect()}
    assert len(nodes) == 2 and None not in nodes
    with pytest.raises(Exception, match="read_journal"):  # the format gives raw records only
        spark.read.format("petrel-journal").option("path", str(small_dir)).option("view", "resolved").load().count()


def test_damage_before_the_tail_is_an_error_row_and_resolves_as_skip_damaged_recovery(spark, data_dir, tmp_path):
    directory, _ = data_dir
    copy = tmp_path / "data"
    shutil.copytree(directory, copy)
    segments = sorted((copy / "journal").glob("petrel-data-*.pj"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    damaged = None
    for seg in segments[:-1]:  # not the newest: damage there is never a torn tail
        data = bytearray(seg.read_bytes())
        at = max(data.find(b"order-%d." % i) for i in range(200, 300))  # a message still held
        if at >= 0:
            data[at + 3] ^= 0x20
            seg.write_bytes(bytes(data))
            damaged = seg
            break
    assert damaged is not None
    raw = read_journal(spark, str(copy)).where("error IS NOT NULL").select("file", "record_type", "error").collect()
    hit = [r for r in raw if r.file == f"journal/{damaged.name}"]
    # in the middle of the segment, or its last record: either way damage, later segments hold data
    assert len(hit) == 1 and hit[0].record_type is None and "--skip-damaged" in hit[0].error
    held = Counter(r.queue for r in read_journal(spark, str(copy), view="resolved").select("queue").collect())
    assert held["orders"] == HELD["orders"] - 1

    broker = BrokerProcess(tmp_path / "b", settings=SETTINGS, data_dir=copy).start("--skip-damaged")
    try:
        with Connection(f"tcp://127.0.0.1:{broker.port}") as conn:
            assert {q: conn.queue_info(q)["message_count"] for q in HELD} == dict(held)
    finally:
        broker.kill9()
