"""The chaos harness's client channels against a real broker: a consumer dropped abruptly
(`abort`, the `consumer_drop` fault) must really be gone, so the broker gives what it held
unacknowledged to the next consumer at once, not after the next broker restart."""

from __future__ import annotations

import pytest

from conftest import connect
from petrel.testing.chaos.channels import stomp_consumer

pytestmark = pytest.mark.system

DEADLINE = 60.0  # generous: the machine may be busy; the messages come back at once when it works


@pytest.mark.parametrize("mode", ["transacted", "client-individual", "client"])
def test_an_aborted_stomp_consumer_returns_its_unacknowledged_messages_at_once(broker, mode):
    conn, listener = connect(broker)
    for i in range(10):
        conn.send("/queue/dropped", f"m{i}|", headers={"persistent": "true", "receipt": str(i)})
    for _ in range(10):
        listener.receipts.get(timeout=DEADLINE)

    got = []
    consumer = stomp_consumer(broker.stomp_port, "/queue/dropped", mode, client_id=None, subscription=None,
                              on_delivery=got.append, on_ack_confirmed=lambda batch: None)
    held = [consumer.receive(DEADLINE) for _ in range(10)]
    assert [d.mid for d in held] == [f"m{i}" for i in range(10)]
    # The broker has nothing more to write to this consumer: only the reset tells it the
    # consumer left (stomp.py's receiver thread is idle in recv() from here on).
    consumer.abort()

    conn.subscribe("/queue/dropped", id="again", ack="client-individual")
    back = [listener.get(timeout=DEADLINE) for _ in range(10)]
    assert sorted(f.body for f in back) == sorted(f"m{i}|" for i in range(10))
    assert all(f.headers.get("redelivered") == "true" for f in back)
    for f in back:
        conn.ack(f.headers["ack"])
    conn.disconnect()
