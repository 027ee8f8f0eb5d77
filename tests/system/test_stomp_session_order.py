"""STOMP through the server session (petrel.server.session), on a real broker: an ERROR comes
after the receipts of the frames before it, in order, and a refused SEND is not stored."""

from __future__ import annotations

import pytest

from conftest import connect, raw

pytestmark = pytest.mark.system


def read_until_closed(s) -> bytes:
    data = b""
    s.settimeout(10)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_an_error_follows_the_receipts_of_the_frames_before_it(broker):
    s = raw(broker)
    s.sendall(b"CONNECT\naccept-version:1.2\n\n\x00"
              b"SEND\ndestination:/queue/ordered\npersistent:true\nreceipt:durable\n\nd\x00"
              b"SEND\ndestination:/queue/ordered\nreceipt:plain\n\np\x00"
              b"COMMIT\ntransaction:never-begun\nreceipt:commit\n\n\x00"
              b"SEND\ndestination:/queue/ordered\nreceipt:after\n\nlost\x00")
    data = read_until_closed(s)
    s.close()
    durable, plain, error = (data.find(x) for x in (b"receipt-id:durable", b"receipt-id:plain", b"\x00ERROR\n"))
    assert 0 <= durable < plain < error, data
    assert b"never-begun" in data[error:] and b"not open" in data[error:]
    assert b"receipt-id:commit" not in data and b"receipt-id:after" not in data
    # the two sends before the refused COMMIT are stored; the one after it is not
    conn, listener = connect(broker)
    conn.subscribe("/queue/ordered", id="1")
    assert [listener.get().body for _ in range(2)] == ["d", "p"]
    assert listener.nothing_within(0.3)
    conn.disconnect()


def test_a_send_to_an_internal_address_is_refused_and_not_stored(broker):
    s = raw(broker)
    s.sendall(b"CONNECT\naccept-version:1.2\n\n\x00"
              b"SEND\ndestination:/queue/$.petrel.sf.x\nreceipt:r\n\nforged\x00")
    data = read_until_closed(s)
    s.close()
    assert b"ERROR" in data and b"internal to the cluster" in data and b"receipt-id:r" not in data
