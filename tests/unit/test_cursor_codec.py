"""CORE frames of sequence ranges and cursors (0x18-0x1F): whole, byte by byte, with trailing
bytes, and only in the direction they are for."""

from __future__ import annotations

import pytest

from petrel.codec.core import NEED_DATA, Connect, Connected, CoreConnection, Role
from petrel.codec.core.cursors import (
    BodyRead,
    BrowseRange,
    CursorAck,
    CursorCreate,
    CursorDelete,
    CursorQuery,
    QueueSeqs,
    RangeMessage,
    RangeResult,
)
from petrel.codec.errors import LocalProtocolError


def drain(conn):
    out = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def pair():
    client, server = CoreConnection(Role.CLIENT), CoreConnection(Role.SERVER)
    server.receive_data(client.send(Connect([1], ["large-messages"])))
    [connect] = drain(server)
    assert server.accept(connect) == 1
    client.receive_data(server.send(Connected(1, [], "Petrel", "node-1")))
    assert len(drain(client)) == 1
    return client, server


REQUESTS = [
    QueueSeqs(1, "orders"),
    BrowseRange(2, "orders", 10, 20, 5),
    CursorAck(3, "orders", "spark", 19, False),
    CursorCreate(4, "orders", "spark", -1, True),
    CursorQuery(5, "orders", None),
    CursorQuery(6, "orders", "spark"),
    CursorDelete(7, "orders", "spark"),
    BodyRead(8, "orders", 12, 100, 4096),
]


def test_every_request_crosses_whole_and_byte_by_byte():
    client, server = pair()
    data = b"".join(client.send(e) for e in REQUESTS)
    server.receive_data(data)
    assert drain(server) == REQUESTS
    client, server = pair()
    got = []
    for i in range(len(data)):
        server.receive_data(data[i:i + 1])
        got += drain(server)
    assert got == REQUESTS


def test_a_range_result_crosses_with_its_messages():
    client, server = pair()
    result = RangeResult(2, "node-1", "orders", [
        RangeMessage(10, 77, "dup-1", "orders", True, 4, 0, 123, 0, 0, {"k": "v", "n": 1}, b"body", 4),
        RangeMessage(12, 78, None, "orders", False, 9, 0, 124, 0, 2, {}, b"cut", 10_000),
    ], 13, 10, 21)
    client.receive_data(server.send(result) + b"\0\0")  # trailing bytes: the next frame's start
    assert drain(client) == [result]


def test_frames_go_one_way_only():
    client, server = pair()
    with pytest.raises(LocalProtocolError):
        server.send(QueueSeqs(1, "q"))
    with pytest.raises(LocalProtocolError):
        client.send(RangeResult(1, "n", "q"))
