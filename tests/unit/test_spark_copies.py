"""Migrated copies as the Spark source reads them (petrel.spark.copies): where a message moved
from carries its earlier positions (petrel.core.remote.ORIGIN), and a batch reads each message
at one position only, its owner. No Spark or broker runs: ranges are made by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install petrel[spark])")

from petrel.client import ClientError, NotFound, RangeRecord, SeqRange  # noqa: E402
from petrel.core.remote import ORIGIN, origin_hops, with_origin  # noqa: E402
from petrel.spark.copies import NoCopies, owned, owner, read_copies  # noqa: E402


def record(seq: int, hops: list[tuple[str, str, int]] = (), body: bytes = b"") -> RangeRecord:
    props: dict = {}
    for n, q, s in hops:
        props = with_origin(props, n, q, s)
    return RangeRecord(seq, seq, None, "q", True, 4, 0, 0, 0, 0, props, body)


def test_each_migration_appends_its_hop_and_a_client_value_that_does_not_parse_is_no_hop():
    props = with_origin({"k": "v"}, "A", "q", 5)
    props = with_origin(props, "B", "q", 17)
    assert origin_hops(props) == [("A", "q", 5), ("B", "q", 17)]
    assert props["k"] == "v"
    assert origin_hops({}) == [] and origin_hops({ORIGIN: "not json"}) == [] and origin_hops({ORIGIN: "[1, 2]"}) == []


def test_a_copy_is_read_at_its_first_covered_position():
    cover = {"A/q": 100, "B/q": 50}
    assert owner(record(60, [("A", "q", 99)]), "B", "q", cover) == "A/q"  # read on A already
    assert owner(record(60, [("A", "q", 100)]), "B", "q", cover) is None  # not read on A, a later batch here
    assert owner(record(40, [("A", "q", 100)]), "B", "q", cover) == "B/q"  # not read on A, read here
    assert owner(record(40), "B", "q", cover) == "B/q"
    assert owner(record(40, [("C", "q", 3)]), "B", "q", cover) == "B/q"  # a node the query never read
    # A -> B -> C: read on B (B's offset passed 20), not on A
    assert owner(record(7, [("A", "q", 150), ("B", "q", 20)]), "C", "q", {**cover, "C/q": 10}) == "B/q"


def test_a_range_keeps_what_the_batch_reads_there():
    messages = [record(40), record(41, [("A", "q", 10)]), record(42, [("A", "q", 120)])]
    got = owned(messages, "B", "q", {"A/q": 100, "B/q": 50})
    assert [m.seq for m in got] == [40, 42]
    assert owned(messages, "B", "q", {}) == messages


def pages(held: dict[str, list[RangeRecord]], size: int = 2):
    def browse(node: str, url: str, at: int) -> SeqRange:
        if node not in held:
            raise NotFound("no such queue")
        msgs = [m for m in held[node] if m.seq >= at][:size]
        tail = max((m.seq for m in held[node]), default=0) + 1
        nxt = msgs[-1].seq + 1 if len(msgs) == size else tail
        return SeqRange(node, "q", at, msgs, nxt, 0, tail)
    return browse


def test_a_gone_nodes_range_is_read_from_its_copies_once_each():
    b = [record(5, [("A", "q", 1)]), record(6, [("A", "q", 2)]), record(7, [("A", "q", 9)]), record(8)]
    c = [record(3, [("A", "q", 3)]), record(4, [("A", "q", 2)])]  # 2 twice: a migration caught half way
    peers = (("B", "b", 5), ("C", "c", 0), ("D", "d", 0))
    got = read_copies("A", "q", 1, 4, peers, {"A/q": 4, "B/q": 9}, pages({"B": b, "C": c}))
    assert [(n, [m.seq for m in ms]) for n, ms in got] == [("B", [5, 6]), ("C", [3])]
    # a copy past the range, nothing in it: the node moved its messages, none of this range
    assert read_copies("A", "q", 3, 4, (("B", "b", 7),), {"A/q": 4}, pages({"B": b})) == []


def test_no_copy_at_or_after_the_range_means_the_node_is_only_away():
    b = [record(5, [("A", "q", 1)])]  # an old drain's copy, below the range
    with pytest.raises(NoCopies):
        read_copies("A", "q", 10, 20, (("B", "b", 0),), {"A/q": 20}, pages({"B": b}))


class FakePeer:
    """A peer as `read_gone_range` sees it: says node A is moving messages to it for `moving`
    looks, then holds `held` (the copies that have arrived by then)."""

    def __init__(self, node_id: str, moving: int, early: list[RangeRecord], held: list[RangeRecord]) -> None:
        self.node_id, self.moving, self.early, self.held, self.looks = node_id, moving, early, held, 0

    def queue_info(self, queue: str) -> dict:
        self.looks += 1
        return {"name": queue, "migrating_from": ["A"] if self.looks <= self.moving else []}

    def browse_range(self, queue: str, at: int, to: int, most: int) -> SeqRange:
        msgs = [m for m in (self.held if self.looks > self.moving else self.early) if m.seq >= at][:most]
        tail = max((m.seq for m in self.held), default=0) + 1
        return SeqRange(self.node_id, queue, at, msgs, tail, 0, tail)

    def close(self) -> None:
        pass


def test_a_gone_nodes_range_waits_until_its_messages_stop_moving(monkeypatch):
    from petrel.spark import copies
    from petrel.spark.source import QueueRange

    arrived = [record(10 + i, [("A", "q", i)]) for i in range(4)]
    peer = FakePeer("B", 3, arrived[:1], arrived)
    monkeypatch.setattr(copies, "connect", lambda url, credentials, timeout: peer)
    monkeypatch.setattr(copies, "MOVING_WAIT", 0.01)
    part = QueueRange("", "A", "q", 0, 4, (("A/q", 4), ("B/q", 10)), (("B", "b", 10),))
    got = copies.read_gone_range(part, {}, 30.0)
    assert peer.looks == 4  # three looks while A was moving messages to B, none read before the fourth
    assert [(n, [m.seq for m in ms]) for n, ms in got] == [("B", [10, 11, 12, 13])]
    still = FakePeer("B", 10 ** 9, arrived[:1], arrived)
    monkeypatch.setattr(copies, "connect", lambda url, credentials, timeout: still)
    with pytest.raises(ClientError, match="still moving"):
        copies.read_gone_range(part, {}, 0.05)


def test_a_task_whose_node_left_mid_read_reads_the_rest_from_where_it_moved(monkeypatch):
    from petrel.spark import source

    def unreachable(url, **credentials):
        raise ClientError("connection refused")

    monkeypatch.setattr(source, "Connection", unreachable)
    monkeypatch.setattr(source, "LEFT_LOOK", 0.0)
    asked = []

    def moved(part, at, credentials, timeout):
        asked.append(at)
        return [("B", [record(20, [("A", "q", 7)], b"seven")])]

    monkeypatch.setattr(source, "moved_away", moved)
    opts = source.source_options({"queues": "q", "reconnectTimeout": "5"})
    part = source.QueueRange("tcp://a", "A", "q", 5, 10, (("A/q", 10), ("B/q", 20)), (("B", "tcp://b", 20),))
    batches = list(source.read_range(opts, part))
    assert asked == [5]
    assert [(r["node"], r["seq"], r["body"]) for b in batches for r in b.to_pylist()] == [("B", 20, b"seven")]
    # still a member, or nothing moved: the node is only away, and the task fails after reconnectTimeout
    monkeypatch.setattr(source, "moved_away", lambda part, at, credentials, timeout: None)
    with pytest.raises(ClientError, match="could not read q from node A"):
        list(source.read_range(source.source_options({"queues": "q", "reconnectTimeout": "0.3"}), part))
