"""A CORE connection lost while a flush waits for confirmations: the flush raises, it never
hangs and never reports the unconfirmed sends as confirmed (found by the chaos harness, seed
2810: a broker that failed a large message on a full disk closed the connection, and the
producer's flush() waited forever)."""

from __future__ import annotations

import threading

import pytest

from petrel.client import ClientError, Connection, Message
from petrel.testing.process import BrokerProcess, wait_for
from petrel.testing.proxy import TcpProxy

pytestmark = pytest.mark.system


def test_a_flush_waiting_when_the_connection_is_lost_raises(tmp_path):
    broker = BrokerProcess(tmp_path / "b").start()
    proxy = TcpProxy("127.0.0.1", broker.port).start()
    conn = Connection(f"tcp://127.0.0.1:{proxy.port}")
    try:
        session = conn.session()
        producer = session.producer("queue://lost")
        producer.send(Message(b"first"))
        session.flush()
        proxy.freeze()  # no confirmation comes back
        for i in range(10):
            producer.send(Message(b"m%d" % i))
        outcome: list[object] = []

        def flush() -> None:
            try:
                session.flush()
                outcome.append("confirmed")
            except ClientError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=flush, daemon=True)
        thread.start()
        wait_for(lambda: session._async.unconfirmed == 10 and session._async._drained is not None, 30,
                 message="the flush did not start waiting")
        proxy.cut()  # the connection is lost (a plain tcp:// URL does not reconnect)
        thread.join(30)
        assert not thread.is_alive(), "flush() still waiting 30 s after the connection was lost"
        assert len(outcome) == 1 and isinstance(outcome[0], ClientError), outcome
        assert "lost" in str(outcome[0])
    finally:
        conn.close(timeout=2)
        proxy.stop()
        broker.kill9()
