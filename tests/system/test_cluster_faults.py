"""Cluster faults on real processes: cut and frozen links, `kill -9` of either end of a bridge,
redistribution (scheduled and paged messages, no ping-pong) and large messages over a bridge.

The accounting is the same everywhere: every message whose send the producer saw confirmed is
consumed exactly once in the cluster (none lost, none twice). Consumers that may lose their
broker commit what they took in transactions, so a message only counts once its
acknowledgement is on disk; anything else they held comes again and is counted then.
"""

from __future__ import annotations

import collections
import hashlib
import os
import threading
import time

import pytest
from cluster_harness import cluster_view, make_cluster, start_all, wait_bindings, wait_connected

from petrel.client import ClientError, Connection, Message
from petrel.testing.process import free_port, wait_for
from petrel.testing.proxy import TcpProxy

pytestmark = pytest.mark.system

N = 2000


def connected_pair(tmp_path, teardown, **options):
    """Two started, bridged nodes and a client connection to each, all torn down after the test."""
    a, b = make_cluster(tmp_path, 2, **options)
    teardown(a)
    teardown(b)
    start_all([a, b])
    wait_connected([a, b])
    ca = Connection(f"tcp://127.0.0.1:{a.port}")
    cb = Connection(f"tcp://127.0.0.1:{b.port}")
    teardown(ca)
    teardown(cb)
    return a, b, ca, cb


def body(i: int) -> bytes:
    return b"m-%05d" % i


def bridge_to(node, peer_id: str) -> dict:
    return next(b for b in cluster_view(node)["bridges"] if b["node_id"] == peer_id)


def queue_messages(node, name: str) -> int:
    """Messages in queue `name` on `node` (0 when the queue does not exist)."""
    with Connection(f"tcp://127.0.0.1:{node.port}") as c:
        info = c.queue_info(name)
    return info["message_count"] if info else 0


def wait_bridge(node, peer_id: str, up: bool, timeout: float = 20) -> None:
    def state():
        try:
            return (bridge_to(node, peer_id)["state"] == "up") == up
        except (OSError, StopIteration):
            return False

    wait_for(state, timeout, 0.02, f"bridge to {peer_id} not {'up' if up else 'down'} within {timeout}s")


class Producer:
    """Sends `body(i)` for i in a range, durable, `flush`ing every `batch`; remembers what was confirmed."""

    def __init__(self, node, address: str = "queue://orders", batch: int = 50) -> None:
        self.conn = Connection(f"tcp://127.0.0.1:{node.port}")
        self.session = self.conn.session()
        self.producer = self.session.producer(address)
        self.batch = batch
        self.confirmed: list[bytes] = []

    def send(self, numbers: range) -> None:
        pending = []
        for i in numbers:
            self.producer.send(body(i), durable=True)
            pending.append(body(i))
            if len(pending) >= self.batch:
                self.session.flush()
                self.confirmed += pending
                pending = []
        if pending:
            self.session.flush()
            self.confirmed += pending

    def send_in_background(self, numbers: range) -> threading.Thread:
        thread = threading.Thread(target=self.send, args=(numbers,), daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        try:
            self.conn.close(2)
        except (ClientError, OSError, TimeoutError):
            pass  # its broker was killed


class Collector:
    """A consumer of `queue://orders` in a thread of its own, in a transacted session: what it
    counts is what it committed. It ends quietly when its broker goes away; a commit cut off by
    that leaves its messages `in_doubt` (committed, or back in the queue: the client cannot know)."""

    def __init__(self, node, address: str = "queue://orders", batch: int = 100) -> None:
        self.conn = Connection(f"tcp://127.0.0.1:{node.port}")
        self.session = self.conn.session(transacted=True)
        self.consumer = self.session.consumer(address)
        self.batch = batch
        self.got: list[bytes] = []
        self.in_doubt: list[bytes] = []
        self.lost_broker = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                taken = []
                while len(taken) < self.batch and (m := self.consumer.receive(0.05)) is not None:
                    taken.append(m.body)
                if taken:
                    try:
                        self.session.commit()
                    except BaseException:
                        self.in_doubt = taken
                        raise
                    self.got += taken
        except (ClientError, OSError, TimeoutError):
            self.lost_broker = True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        try:
            self.conn.close(2)
        except (ClientError, OSError, TimeoutError):
            pass


def receive_n(consumer, n: int, timeout: float = 15) -> list:
    """Up to `n` messages, within `timeout` seconds in all."""
    deadline = time.monotonic() + timeout
    out = []
    while len(out) < n and (left := deadline - time.monotonic()) > 0:
        if (m := consumer.receive(left)) is not None:
            out.append(m)
    return out


def assert_exactly_once(got: list[bytes], confirmed: list[bytes], sent: int, in_doubt: list[bytes] = ()) -> None:
    """`in_doubt`: taken by a consumer whose commit its broker's death cut off; each may be
    missing (it was committed) or consumed once more (it was not)."""
    twice = [b for b, n in collections.Counter(got).items() if n > 1]
    assert not twice, f"{len(twice)} messages consumed more than once, e.g. {twice[:5]}"
    missing = set(confirmed) - set(got) - set(in_doubt)
    assert not missing, f"{len(missing)} confirmed messages never consumed, e.g. {sorted(missing)[:5]}"
    assert set(got) <= {body(i) for i in range(sent)}


def wait_all(collectors, expected: int, timeout: float = 30) -> list[bytes]:
    def done():
        got = [b for c in collectors for b in c.got]
        return len(set(got).union(*(c.in_doubt for c in collectors))) >= expected and got

    try:
        wait_for(done, timeout, 0.05)
    except TimeoutError:
        counts = [(len(c.got), len(set(c.got)), len(c.in_doubt), c.lost_broker) for c in collectors]
        raise AssertionError(f"not all {expected} messages consumed within {timeout}s; per collector "
                             f"(got, unique, in doubt, lost its broker): {counts}") from None
    # anything delivered twice would arrive right behind: give it the chance (bounded)
    settle_until = time.monotonic() + 0.5
    count = sum(len(c.got) for c in collectors)
    wait_for(lambda: time.monotonic() > settle_until or sum(len(c.got) for c in collectors) > count, 2, 0.05)
    return [b for c in collectors for b in c.got]


def proxied_pair(tmp_path, teardown, **options):
    """Nodes A and B; A's bridge to B goes through a TcpProxy (B reaches A directly)."""
    listen = free_port()
    a, b = make_cluster(tmp_path, 2, via={(0, 1): listen}, **options)
    proxy = TcpProxy("127.0.0.1", b.port, listen_port=listen).start()
    teardown(proxy)
    teardown(a)
    teardown(b)
    start_all([a, b])
    wait_connected([a, b])
    return a, b, proxy


# -- a link cut, or frozen, and healed ------------------------------------------------------------


@pytest.mark.parametrize("fault", ["cut", "freeze"])
def test_a_broken_bridge_link_loses_and_duplicates_nothing(tmp_path, teardown, fault) -> None:
    a, b, proxy = proxied_pair(tmp_path, teardown, connection_ttl=1000, redistribution_delay=0)
    b_id = cluster_view(b)["node_id"]
    collector = Collector(b)
    teardown(collector)
    wait_bindings(a, "orders", consumers=1)
    producer = Producer(a)
    teardown(producer)
    sending = producer.send_in_background(range(N // 2))
    wait_for(lambda: len(collector.got) >= N // 8, 30, 0.005, "forwarding did not start")
    getattr(proxy, fault)()  # in the middle of forwarding
    wait_bridge(a, b_id, up=False)
    sending.join(30)
    producer.send(range(N // 2, N))  # while the link is down: kept on A, then redistributed
    proxy.heal()
    wait_bridge(a, b_id, up=True)
    got = wait_all([collector], N)
    assert_exactly_once(got, producer.confirmed, N)
    assert len(producer.confirmed) == N
    view = bridge_to(a, b_id)
    assert view["reconnects"] >= 1
    wait_for(lambda: bridge_to(a, b_id)["backlog"] == 0, 10, 0.05, "the store-and-forward queue did not empty")
    assert queue_messages(a, "orders") == 0


# -- kill -9 of either end ------------------------------------------------------------------------


def test_kill_9_of_the_receiving_node_then_restart(tmp_path, teardown) -> None:
    # connection_ttl is long so a frozen link stays "up" for A: what it routes to B piles up in
    # A's store-and-forward queue, and B dies with forwarding in full swing.
    a, b, proxy = proxied_pair(tmp_path, teardown, connection_ttl=20000, redistribution_delay=0)
    b_id = cluster_view(b)["node_id"]
    first = Collector(b)
    teardown(first)
    wait_bindings(a, "orders", consumers=1)
    producer = Producer(a)
    teardown(producer)
    producer.send(range(600))
    wait_for(lambda: len(first.got) >= 100, 30, 0.005, "forwarding did not start")
    proxy.freeze()
    producer.send(range(600, 1200))  # confirmed by A, stuck in its store-and-forward queue
    assert bridge_to(a, b_id)["backlog"] >= 600
    b.kill9()
    proxy.heal()
    wait_bridge(a, b_id, up=False)
    wait_for(lambda: first.lost_broker, 10, 0.05, "the consumer did not notice its broker die")
    producer.send(range(1200, N))  # B is down: kept on A
    b.start()
    second = Collector(b)
    teardown(second)
    got = wait_all([first, second], N)
    assert_exactly_once(got, producer.confirmed, N, in_doubt=first.in_doubt)
    assert len(producer.confirmed) == N
    wait_for(lambda: bridge_to(a, b_id)["backlog"] == 0, 10, 0.05, "the store-and-forward queue did not empty")
    assert queue_messages(a, "orders") == 0


def test_kill_9_of_the_sending_node_then_restart(tmp_path, teardown) -> None:
    a, b, proxy = proxied_pair(tmp_path, teardown, connection_ttl=20000)
    b_id = cluster_view(b)["node_id"]
    collector = Collector(b)
    teardown(collector)
    wait_bindings(a, "orders", consumers=1)
    producer = Producer(a)
    producer.send(range(500))
    wait_for(lambda: len(collector.got) >= 100, 30, 0.005, "forwarding did not start")
    proxy.freeze()
    producer.send(range(500, 1500))  # confirmed by A, stuck in its store-and-forward queue
    assert bridge_to(a, b_id)["backlog"] >= 1000
    a.kill9()
    producer.close()
    proxy.heal()
    a.start()
    got = wait_all([collector], 1500)
    assert_exactly_once(got, producer.confirmed, 1500)
    assert len(producer.confirmed) == 1500
    wait_for(lambda: bridge_to(a, b_id)["backlog"] == 0, 10, 0.05, "the store-and-forward queue did not empty")


def test_kill_9_in_the_middle_of_a_redistribution(tmp_path, teardown) -> None:
    # A batch moves in one store transaction (copies stored, originals removed); its copies
    # must not leave before that transaction is on disk, or a restart would move them again.
    a, b = make_cluster(tmp_path, 2, redistribution_delay=0)
    teardown(a)
    teardown(b)
    start_all([a, b])
    wait_connected([a, b])
    producer = Producer(a, batch=500)
    producer.send(range(5000))
    producer.close()
    collector = Collector(b, batch=200)
    teardown(collector)
    wait_for(lambda: cluster_view(a)["messages_redistributed"] >= 300, 30, 0.001, "redistribution did not start")
    a.kill9()
    a.start()
    got = wait_all([collector], 5000)
    assert_exactly_once(got, producer.confirmed, 5000)
    assert len(producer.confirmed) == 5000
    wait_for(lambda: queue_messages(a, "orders") == 0, 10, 0.05, "messages left on A")


def test_messages_for_a_queue_deleted_while_they_travel_are_kept(tmp_path, teardown) -> None:
    # B's auto-created queue goes when its last consumer leaves; copies A routed to it are
    # still on their way (held by a frozen link here). B keeps them instead of dropping them.
    a, b, proxy = proxied_pair(tmp_path, teardown, connection_ttl=20000)
    b_id = cluster_view(b)["node_id"]
    cb = Connection(f"tcp://127.0.0.1:{b.port}")
    teardown(cb)
    consumer = cb.session().consumer("queue://orders")
    wait_bindings(a, "orders", consumers=1)
    producer = Producer(a)
    teardown(producer)
    producer.send(range(100))
    assert len(receive_n(consumer, 100)) == 100
    proxy.freeze()
    producer.send(range(100, 300))  # routed to B's consumer: they wait in A's store-and-forward queue
    consumer.close()
    wait_for(lambda: cb.queue_info("orders") is None, 10, 0.02, "B did not delete its empty auto-created queue")
    proxy.heal()
    wait_for(lambda: bridge_to(a, b_id)["backlog"] == 0, 20, 0.05, "A's store-and-forward queue did not empty")
    again = cb.session().consumer("queue://orders")
    got = [m.body for m in receive_n(again, 200, 10)]
    assert again.receive(0.3) is None
    assert_exactly_once(got, [body(i) for i in range(100, 300)], 300)


# -- redistribution -------------------------------------------------------------------------------

PAGED = """min_large_message_size = 1048576
[address_settings.paged]
max_size_bytes = 65536
page_size_bytes = 65536
address_full_policy = "PAGE"
"""


def test_redistribution_moves_available_scheduled_and_paged_messages_once(tmp_path, teardown) -> None:
    a, b, ca, cb = connected_pair(tmp_path, teardown, redistribution_delay=0, extra_top=PAGED)
    sa = ca.session()
    # messages on A, which has a consumer of its own: available, paged (4 MB through an
    # address that holds 64 KiB in memory) and scheduled
    on_a = sa.consumer("queue://orders", window=0)
    producer = sa.producer("queue://orders")
    for i in range(300):
        producer.send(Message(body(i)))
    paged = sa.producer("queue://paged")
    blobs = [os.urandom(16 * 1024) for _ in range(256)]
    for blob in blobs:
        paged.send(Message(blob))
    due = int(time.time() * 1000) + 3000
    for i in range(300, 320):
        producer.send(Message(body(i), scheduled=due))
    sa.flush()
    taken = [on_a.receive(5) for _ in range(10)]
    assert all(m is not None for m in taken)
    on_a.close()
    assert queue_messages(a, "paged") == 256
    assert list(a.data_dir.glob("paging/*/*.page")), "the paged address did not page on A"
    # the consumers move to B: everything left goes there, once
    sb = cb.session()
    orders_b = sb.consumer("queue://orders")
    paged_b = sb.consumer("queue://paged")
    got = receive_n(orders_b, 290)
    assert len(got) == 290
    wait_for(lambda: queue_messages(a, "orders") == 0, 10, 0.05, "the scheduled messages stayed on A's queue")
    assert int(time.time() * 1000) < due, "too slow to tell whether scheduled messages moved while scheduled"
    assert cluster_view(a)["messages_redistributed"] >= 310
    # the scheduled copies keep their delivery time: they wait in A's store-and-forward queue
    # (or B's queue) until due, and are never delivered early
    later = []
    for _ in range(20):
        m = orders_b.receive(10)
        assert m is not None, "a scheduled message did not arrive"
        assert int(time.time() * 1000) >= due - 5, "a scheduled message was delivered before its time"
        later.append(m)
    assert orders_b.receive(0.3) is None
    bodies = [m.body for m in taken + got + later]
    assert_exactly_once(bodies, [body(i) for i in range(320)], 320)
    assert sorted(m.body for m in later) == [body(i) for i in range(300, 320)]
    got_paged = [m.body for m in receive_n(paged_b, len(blobs))]
    assert paged_b.receive(0.3) is None
    assert sorted(got_paged) == sorted(blobs)
    assert cluster_view(a)["messages_redistributed"] == 310 + 256
    assert queue_messages(a, "orders") == 0 and queue_messages(a, "paged") == 0


def test_redistribution_looks_past_messages_no_remote_consumer_wants(tmp_path, teardown) -> None:
    a, b, ca, cb = connected_pair(tmp_path, teardown, redistribution_delay=0)
    sa = ca.session()
    producer = sa.producer("queue://colours")
    for i in range(600):  # more blue ones than one redistribution batch, then the red ones
        producer.send(Message(body(i), {"colour": "blue" if i < 550 else "red"}))
    sa.flush()
    reds = cb.session().consumer("queue://colours", filter="colour = 'red'")
    got = receive_n(reds, 50)
    assert sorted(m.body for m in got) == [body(i) for i in range(550, 600)]
    assert reds.receive(0.3) is None
    assert queue_messages(a, "colours") == 550
    assert cluster_view(a)["messages_redistributed"] == 50


def test_redistribution_does_not_ping_pong(tmp_path, teardown) -> None:
    a, b, ca, cb = connected_pair(tmp_path, teardown, redistribution_delay=0)
    sa, sb = ca.session(), cb.session()
    on_a = sa.consumer("queue://orders")
    on_b = sb.consumer("queue://orders")
    wait_bindings(a, "orders", consumers=1)
    wait_bindings(b, "orders", consumers=1)
    producer = sa.producer("queue://orders")
    for i in range(400):
        producer.send(body(i))
    sa.flush()
    got_a, got_b = [], []
    deadline = time.monotonic() + 15
    while len(got_a) + len(got_b) < 400 and time.monotonic() < deadline:
        got_a += [m.body for m in receive_n(on_a, 400, 0.05)]
        got_b += [m.body for m in receive_n(on_b, 400, 0.05)]
    assert on_a.receive(0.2) is None and on_b.receive(0.1) is None
    assert_exactly_once(got_a + got_b, [body(i) for i in range(400)], 400)
    assert got_a and got_b  # ON_DEMAND shares them
    view_a, view_b = cluster_view(a), cluster_view(b)
    assert view_a["messages_redistributed"] == 0 and view_b["messages_redistributed"] == 0
    forwarded = view_a["messages_forwarded"]
    assert view_b["messages_forwarded"] == 0
    # the consumer moves back to A: what is sent then stays on A
    on_b.close()
    wait_for(lambda: all(x["consumer_count"] == 0 for x in cluster_view(a)["remote_bindings"]
                         if x["name"] == "orders"), 10, 0.05, "A still sees a consumer on B")
    for i in range(400, 600):
        producer.send(body(i))
    sa.flush()
    later = [m.body for m in receive_n(on_a, 200)]
    assert on_a.receive(0.3) is None
    assert sorted(later) == sorted(body(i) for i in range(400, 600))
    view_a, view_b = cluster_view(a), cluster_view(b)
    assert view_a["messages_forwarded"] == forwarded
    assert view_a["messages_redistributed"] == 0 and view_b["messages_redistributed"] == 0
    assert view_b["messages_forwarded"] == 0


# -- large messages -----------------------------------------------------------------------------


def test_a_large_message_crosses_the_bridge_intact(tmp_path, teardown) -> None:
    a, b = make_cluster(tmp_path, 2, extra_top="min_large_message_size = 102400\n")
    teardown(a)
    teardown(b)
    start_all([a, b])
    wait_connected([a, b])
    blobs = [os.urandom(300 * 1024), os.urandom(1300 * 1024), os.urandom(150 * 1024)]
    with Connection(f"tcp://127.0.0.1:{b.port}") as cb, Connection(f"tcp://127.0.0.1:{a.port}") as ca:
        consumer = cb.session().consumer("queue://big")
        wait_bindings(a, "big", consumers=1)
        session = ca.session()
        producer = session.producer("queue://big")
        for i, blob in enumerate(blobs):
            producer.send(Message(blob, {"i": i, "sha": hashlib.sha256(blob).hexdigest()}))
        session.flush()
        got = [consumer.receive(10) for _ in blobs]
        assert consumer.receive(0.5) is None
    assert all(m is not None for m in got)
    got.sort(key=lambda m: m.properties["i"])
    for m, blob in zip(got, blobs):
        assert len(m.body) == len(blob)
        assert m.body == blob
        assert m.properties["sha"] == hashlib.sha256(m.body).hexdigest()
    assert cluster_view(a)["messages_forwarded"] == len(blobs)


def test_large_messages_through_a_cut_link_arrive_intact_once(tmp_path, teardown) -> None:
    a, b, proxy = proxied_pair(tmp_path, teardown, connection_ttl=1000, extra_top="min_large_message_size = 102400\n")
    b_id = cluster_view(b)["node_id"]
    collector = Collector(b, "queue://big", batch=5)
    teardown(collector)
    wait_bindings(a, "big", consumers=1)
    blobs = [os.urandom(300 * 1024) for _ in range(30)]
    ca = Connection(f"tcp://127.0.0.1:{a.port}")
    teardown(ca)
    session = ca.session()
    producer = session.producer("queue://big")
    for blob in blobs:
        producer.send(Message(blob))
    session.flush()
    wait_for(lambda: len(collector.got) >= 3, 30, 0.002, "forwarding did not start")
    proxy.cut()  # with large messages part-way through their chunks
    wait_bridge(a, b_id, up=False)
    proxy.heal()
    got = wait_all([collector], len(blobs))
    assert sorted(got) == sorted(blobs)
    wait_for(lambda: bridge_to(a, b_id)["backlog"] == 0, 10, 0.05, "the store-and-forward queue did not empty")
    # no large-message file is left behind on either side once everything is consumed
    def no_files() -> bool:
        return not any(any((n.data_dir / "large-messages").iterdir()) for n in (a, b))

    wait_for(no_files, 10, 0.05, "large-message files left behind")


def peak_rss_mib(node) -> float:
    for line in open(f"/proc/{node.proc.pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_big_message_streams_over_the_bridge_in_order_without_being_held_whole(tmp_path, teardown) -> None:
    """48 MiB, then small messages: they arrive after it, in order, and the sending node never
    holds the body (its peak RSS grows by far less than the body)."""
    a, b, ca, cb = connected_pair(tmp_path, teardown, extra_top="min_large_message_size = 102400\n")
    consumer = cb.session().consumer("queue://big", window=0)
    wait_bindings(a, "big", consumers=1)
    before = peak_rss_mib(a)
    big = os.urandom(48 * 1024 * 1024)
    session = ca.session()
    producer = session.producer("queue://big")
    producer.send(Message(big, {"i": 0}, durable=True))
    for i in range(1, 6):
        producer.send(Message(b"small %d" % i, {"i": i}, durable=True))
    session.flush()
    got = receive_n(consumer, 6, timeout=60)
    assert [m.properties["i"] for m in got] == list(range(6))
    assert got[0].body == big
    growth = peak_rss_mib(a) - before
    assert growth < 24, f"node A's peak RSS grew by {growth:.0f} MiB forwarding a 48 MiB body"
