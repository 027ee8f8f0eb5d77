"""Sequence ranges and named cursors over CORE against real `petrel run` processes (what the Spark
source stands on): ranges with gaps after acknowledgements, the same range read twice, a cursor
beside an ordinary consumer, retention across kill -9 with paging and journal compaction,
large and cut bodies, and clear errors for bad requests."""

from __future__ import annotations

import pytest

from petrel.client import AlreadyExists, Connection, Message, NotFound, RequestFailed
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("cursors") / "b").start()
    yield b
    b.kill9()


def url(b: BrokerProcess) -> str:
    return f"tcp://127.0.0.1:{b.port}"


def send(conn: Connection, queue: str, n: int, *, start: int = 0, size: int = 20) -> None:
    with conn.session() as session:
        producer = session.producer(f"queue://{queue}")
        for i in range(start, start + n):
            producer.send(Message(b"%06d" % i + b"x" * size, {"i": i}, duplicate_id=f"{queue}-{i}"))
        session.flush()


def consume(conn: Connection, queue: str, n: int) -> list[Message]:
    """The next n messages, each acknowledged (and the acknowledgements through)."""
    before = conn.queue_info(queue)["messages_acked"]
    with conn.session() as session:
        consumer = session.consumer(f"queue://{queue}", window=0)
        got = []
        for _ in range(n):
            m = consumer.receive(10)
            assert m is not None, f"only {len(got)} of {n} from {queue}"
            m.ack()
            got.append(m)
        wait_for(lambda: conn.queue_info(queue)["messages_acked"] >= before + n, 10)
        consumer.close()
    return got


def read_all(conn: Connection, queue: str, lo: int, hi: int, max: int = 1000):
    """Every record of [lo, hi), range by range, and the absent numbers."""
    records, gaps = [], []
    while lo < hi:
        part = conn.browse_range(queue, lo, hi, max)
        assert part.next_seq > lo
        records += part.messages
        gaps += part.gaps
        lo = part.next_seq
    return records, gaps


def key(records):
    return [(r.seq, r.message_id, r.dup_id, r.timestamp, r.priority, r.properties, r.body) for r in records]


def content(records):
    """`key` but the message ID: a paged message gets a journal ID of its own when it is read
    back into memory (its sequence number, duplicate ID and content stay)."""
    return [(r.seq, r.dup_id, r.timestamp, r.priority, r.properties, r.body) for r in records]


def test_a_range_reports_acknowledged_messages_as_gaps_and_reads_the_same_twice(shared):
    with Connection(url(shared)) as conn:
        conn.create_queue("ranges")
        send(conn, "ranges", 20)
        seqs = conn.queue_seqs("ranges")
        assert seqs.node_id == conn.node_id and seqs.queue == "ranges"
        assert seqs.tail_seq - seqs.earliest_seq == 20
        first = seqs.earliest_seq
        taken = consume(conn, "ranges", 5)  # the five oldest: gone for every range reader
        wait_for(lambda: conn.queue_info("ranges")["message_count"] == 15, 10)
        part = conn.browse_range("ranges", first, seqs.tail_seq, 1000)
        assert part.node_id == conn.node_id
        assert [r.seq for r in part.messages] == list(range(first + 5, first + 20))
        assert part.gaps == list(range(first, first + 5)) and part.next_seq == seqs.tail_seq
        r = part.messages[0]
        assert r.body.startswith(b"000005") and r.dup_id == "ranges-5" and r.properties["i"] == 5
        assert r.timestamp > 0 and r.priority == 4 and r.durable
        assert [m.body for m in taken] == [b"%06d" % i + b"x" * 20 for i in range(5)]
        again = conn.browse_range("ranges", first, seqs.tail_seq, 1000)
        assert key(again.messages) == key(part.messages) and again.next_seq == part.next_seq
        pieces, gaps = read_all(conn, "ranges", first, seqs.tail_seq, max=4)  # in pieces: the same
        assert key(pieces) == key(part.messages) and gaps == part.gaps
        assert conn.queue_info("ranges")["message_count"] == 15  # nothing consumed by reading
        assert conn.earliest_seq("ranges") == first + 5


def test_a_cursor_and_an_ordinary_consumer_on_one_queue(shared):
    with Connection(url(shared)) as conn:
        conn.create_queue("mixed")
        cursor = conn.create_cursor("mixed", "spark")
        send(conn, "mixed", 10)
        tail = conn.tail_seq("mixed")
        first = tail - 10
        consume(conn, "mixed", 3)  # the consumer's are gaps for the cursor
        part = conn.browse_range("mixed", cursor.acked, tail, 100)
        assert [r.seq for r in part.messages] == list(range(first + 3, tail))
        moved = conn.ack_upto("mixed", "spark", first + 6)
        assert moved.acked == first + 7 and moved.node_id == conn.node_id and moved.name == "spark"
        assert conn.ack_upto("mixed", "spark", first + 2).acked == first + 7  # idempotent, monotonic
        assert conn.queue_info("mixed")["message_count"] == 3
        assert conn.cursor("mixed", "spark") == moved
        assert conn.cursors("mixed") == [moved]
        rest = consume(conn, "mixed", 3)  # the consumer still gets what is left
        assert [m.body[:6] for m in rest] == [b"000007", b"000008", b"000009"]
        conn.delete_cursor("mixed", "spark")
        assert conn.cursors("mixed") == []


def test_bad_requests_get_clear_errors_and_the_connection_stays(shared):
    with Connection(url(shared)) as conn:
        conn.create_queue("bad")
        send(conn, "bad", 2)
        tail = conn.tail_seq("bad")
        with pytest.raises(NotFound):
            conn.browse_range("no-such-queue", 0, 10)
        with pytest.raises(NotFound):
            conn.queue_seqs("no-such-queue")
        with pytest.raises(RequestFailed, match="after"):
            conn.browse_range("bad", 10, 5)
        with pytest.raises(RequestFailed, match="negative"):
            conn.browse_range("bad", -1, 5)
        with pytest.raises(RequestFailed, match="max"):
            conn.browse_range("bad", 0, 5, 0)
        with pytest.raises(RequestFailed, match="negative"):
            conn.ack_upto("bad", "c", -3)
        with pytest.raises(RequestFailed):
            conn.ack_upto("bad", "c", tail + 5)  # nothing there yet
        with pytest.raises(NotFound):
            conn.ack_upto("bad", "c", tail - 1, create=False)
        with pytest.raises(NotFound):
            conn.cursor("bad", "c")
        with pytest.raises(NotFound):
            conn.delete_cursor("bad", "c")
        conn.create_cursor("bad", "x")
        with pytest.raises(AlreadyExists):
            conn.create_cursor("bad", "x", exists_ok=False)
        assert conn.create_cursor("bad", "x").name == "x"  # exists_ok: the one there
        with pytest.raises(RequestFailed, match="tail"):
            conn.create_cursor("bad", "y", tail + 10)
        assert len(conn.browse_range("bad", 0, tail).messages) == 2  # still connected and serving


def test_the_clusters_internal_queues_get_no_ranges_or_cursors(shared):
    """$.petrel.* (store-and-forward) is the cluster's own: a cursor there would hold messages in
    transit back, an ack_upto would remove them; refused as a send there is, naming the queue."""
    internal = "$.petrel.sf.petrel-cluster.some-node"
    with Connection(url(shared)) as conn:
        for name in (internal, f"$.petrel.sf.petrel-cluster::{internal}"):
            for call in (lambda: conn.queue_seqs(name), lambda: conn.browse_range(name, 0, 10),
                         lambda: conn.ack_upto(name, "spark", 5), lambda: conn.create_cursor(name, "spark"),
                         lambda: conn.cursor(name, "spark"), lambda: conn.cursors(name),
                         lambda: conn.delete_cursor(name, "spark")):
                with pytest.raises(RequestFailed, match=r"internal to the cluster") as refused:
                    call()
                assert internal in str(refused.value) and "cursors" in str(refused.value)
        conn.create_queue("not-internal")
        send(conn, "not-internal", 1)
        assert conn.ack_upto("not-internal", "spark", conn.tail_seq("not-internal") - 1).name == "spark"


def test_large_bodies_and_bodies_cut_to_fit_an_answer(tmp_path):
    b = BrokerProcess(tmp_path / "b", settings="max_frame_size = 65536\nmin_large_message_size = 16384\n").start()
    try:
        with Connection(url(b)) as conn:
            conn.create_queue("big")
            bodies = [bytes([65 + i]) * size for i, size in enumerate((10, 40_000, 300_000, 20))]
            with conn.session() as session:
                for body in bodies:
                    session.producer("queue://big").send(Message(body))
                session.flush()
            seqs = conn.queue_seqs("big")
            records, gaps = read_all(conn, "big", seqs.earliest_seq, seqs.tail_seq)
            assert [r.body for r in records] == bodies and gaps == []
    finally:
        b.kill9()


SETTINGS = """
journal_file_size = 65536
journal_compact_min_files = 2
journal_compact_percentage = 90

[address_settings."paged"]
max_size_bytes = 65536
"""


def compactions(b: BrokerProcess) -> int:
    return b.log_path.read_text(errors="replace").count("compacted ")


def test_a_cursor_holds_its_messages_across_kill_9_paging_and_compaction(tmp_path):
    b = BrokerProcess(tmp_path / "b", settings=SETTINGS).start()
    try:
        with Connection(url(b)) as conn:
            conn.create_queue("paged")
            conn.create_queue("churn")
            conn.create_cursor("paged", "spark")
            send(conn, "paged", 1500, size=500)  # well past max_size_bytes: most of it paged
            start = conn.earliest_seq("paged")
            tail = conn.tail_seq("paged")
            assert tail - start == 1500
            before, gaps = read_all(conn, "paged", start, tail, max=400)
            assert len(before) == 1500 and gaps == []
            # the cursor moves in steps (each a new journal record, the old one dead), and other
            # traffic comes and goes, until compaction has run
            at = start + 99
            n = 0
            while compactions(b) < 2 and n < 40:
                conn.ack_upto("paged", "spark", at)
                at += 10
                send(conn, "churn", 100, start=n * 100, size=500)
                consume(conn, "churn", 100)
                n += 1
            wait_for(lambda: compactions(b) >= 1, 60, message=f"no compaction:\n{b.log()}")
            cursor = conn.ack_upto("paged", "spark", at)
            assert cursor.acked == at + 1
            held, gaps = read_all(conn, "paged", start, tail, max=400)
            assert gaps == list(range(start, at + 1))
            assert content(held) == content(before[at + 1 - start:])
            assert conn.queue_info("paged")["message_count"] == tail - at - 1
        b.kill9()
        b.start()
        with Connection(url(b)) as conn:
            assert conn.cursor("paged", "spark").acked == at + 1
            assert conn.earliest_seq("paged") == at + 1
            assert conn.tail_seq("paged") >= tail
            after, gaps = read_all(conn, "paged", start, tail, max=400)
            assert content(after) == content(held) and gaps == list(range(start, at + 1))
            conn.ack_upto("paged", "spark", tail - 1)  # everything read: the queue empties
            wait_for(lambda: conn.queue_info("paged")["message_count"] == 0, 10)
            assert conn.earliest_seq("paged") == conn.tail_seq("paged")
    finally:
        b.kill9()
