"""petrel.spark.resolve on hand-made raw records: the replay rules recovery follows, each once
(transactions across segments, COMMIT counts, reclaimed segments, deletes and re-adds, acks
in a transaction, a torn tail after an unsynced hole, page cursors)."""

from __future__ import annotations

import pytest

from petrel.spark import resolve
from petrel.spark.journal import JOURNAL_SCHEMA
from petrel.spark.journal_rows import COLUMNS

pytestmark = pytest.mark.spark

_offsets = iter(range(16, 1_000_000, 100))


def row(kind: str, segment: int, record_type: str | None, **fields) -> tuple:
    values = {"node": "n1", "data_dir": "/d", "file": f"{kind}/{segment}", "kind": kind, "segment": segment,
              "offset": next(_offsets), "record_type": record_type, **fields}
    return tuple(values.get(name) for name, _ in COLUMNS)


def message(segment: int, rid: int, record_type: str = "ADD", **fields) -> tuple:
    return row("journal", segment, record_type, user_type="MESSAGE", record_id=rid, message_id=rid,
               refs=[(100, rid)], address="q", durable=True, body=b"m%d" % rid, **fields)


def commit(segment: int, tx: int, count: int, listed: dict[int, int]) -> tuple:
    return row("journal", segment, "COMMIT", tx_id=tx, tx_count=count, tx_segments=listed)


def page(segment: int, offset: int, rid: int, durable: bool = True) -> tuple:
    return row("page", segment, "PAGE", user_type="MESSAGE", queue_id=100, offset=offset, record_id=rid,
               message_id=rid, seq=rid, address="q", durable=durable)


def test_the_replay_rules(spark):
    rows = [
        row("bindings", 1, "ADD", user_type="QUEUE", record_id=100, queue_id=100, queue="q", address="q"),
        message(1, 1, "ADD_TX", tx_id=50),                # tx 50 spans segments 1 and 2: committed
        message(1, 2),
        message(1, 7), row("journal", 1, "DELETE", record_id=7),  # added then deleted
        message(1, 8), row("journal", 1, "DELETE", record_id=8),
        message(2, 3, "ADD_TX", tx_id=50),
        commit(2, 50, 2, {1: 1, 2: 1}),
        message(2, 4, "ADD_TX", tx_id=51), commit(2, 51, 2, {2: 2}),      # one record missing: dropped
        message(2, 5, "ADD_TX", tx_id=52), commit(2, 52, 2, {9: 1, 2: 1}),  # segment 9 reclaimed: fine
        message(2, 6, "ADD_TX", tx_id=53),                                  # never committed
        row("journal", 2, "UPDATE_TX", user_type="ACK", record_id=2, queue_id=100, tx_id=54),
        commit(2, 54, 1, {2: 1}),                                           # message 2 acked
        row("journal", 2, "DELETE_TX", record_id=1, tx_id=55), row("journal", 2, "ROLLBACK", tx_id=55),
        row("journal", 2, "UPDATE", user_type="DELIVERY", record_id=3, queue_id=100, delivery_count=2),
        message(2, 8),                                                      # added again after its delete
        message(2, 10, after_unsynced_hole=True),                           # not the newest segment: kept
        message(3, 9, after_unsynced_hole=True),                            # the newest: a torn tail
        row("journal", 3, None, error="torn tail"),
        row("journal", 1, "ADD", user_type="PAGE_CURSOR", record_id=200, queue_id=100, page_file=1, page_offset=0),
        row("journal", 2, "UPDATE", user_type="PAGE_CURSOR", record_id=200, page_file=2, page_offset=12),
        page(1, 12, 300), page(2, 12, 301), page(2, 40, 302, durable=False), page(3, 12, 303),
    ]
    held = resolve(spark.createDataFrame(rows, JOURNAL_SCHEMA)).collect()
    assert sorted((r.source, r.message_id) for r in held) == [
        ("journal", 1), ("journal", 3), ("journal", 5), ("journal", 8), ("journal", 10),
        ("page", 301), ("page", 303)]
    assert {r.queue for r in held} == {"q"}
    assert {r.message_id: r.delivery_count for r in held}[3] == 2
