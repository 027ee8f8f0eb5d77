"""Helpers of the tests that read one queue of a 2-node cluster (test_source_scale_down.py,
test_source_redistribution.py): sending numbered bodies, the bodies of the query's output, and
the two nodes with the queue on each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from petrel.client import Connection, Message
from petrel.testing.cluster import make_cluster, start_all, wait_connected


def send(conn: Connection, queue: str, prefix: str, numbers: range) -> set[str]:
    """Persistent messages ``<prefix>-<i>`` to ``queue``; their bodies."""
    with conn.session() as session:
        producer = session.producer(f"queue://{queue}")
        for i in numbers:
            producer.send(Message(f"{prefix}-{i}".encode(), durable=True))
        session.flush()
    return {f"{prefix}-{i}" for i in numbers}


def bodies(spark, out: Path) -> Counter:
    """The rows of the Parquet output ``out`` per body."""
    return Counter(r.body.decode() for r in spark.read.parquet(str(out)).select("body").collect())


def two_nodes(tmp_path: Path, queue: str, **options) -> Iterator[tuple[list, list[Connection]]]:
    """A started 2-node cluster (`make_cluster` ``options``) with ``queue`` on both, and a
    connection to each; every node killed at the end."""
    nodes = make_cluster(tmp_path / "cluster", 2, **options)
    start_all(nodes)
    wait_connected(nodes)
    conns = [Connection(f"tcp://127.0.0.1:{n.port}") for n in nodes]
    for c in conns:
        c.create_queue(queue)
    try:
        yield nodes, conns
    finally:
        for c in conns:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a node may be gone
                pass
        for n in nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.kill9()
