"""AMQP 1.0 over WebSocket (the OASIS WebSocket binding: sub-protocol ``amqp``) against a real
`petrel run`: python-qpid-proton's protocol engine, its bytes carried in WebSocket messages by the
`websockets` library (proton's own client has no WebSocket transport)."""

from __future__ import annotations

import time

import pytest
from websockets.sync.client import connect as ws_connect

from petrel.server import protocols

proton = pytest.importorskip("proton")

pytestmark = [pytest.mark.system,
              pytest.mark.skipif("amqp" not in protocols.names(), reason="no AMQP adapter in the registry yet")]


class AmqpOverWebSocket:
    """A proton Connection whose transport's bytes go through one WebSocket."""

    def __init__(self, port: int, path: str = "/") -> None:
        self.ws = ws_connect(f"ws://127.0.0.1:{port}{path}", subprotocols=["amqp"], open_timeout=10, legacy=True)
        assert self.ws.subprotocol == "amqp"
        self.conn = proton.Connection()
        self.conn.container = f"ws-amqp-{id(self)}"
        self.transport = proton.Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.transport.bind(self.conn)
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()

    def pump(self, until, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            pending = self.transport.pending()
            if pending > 0:
                out = self.transport.peek(pending)
                self.transport.pop(len(out))
                self.ws.send(out)  # binary, as the binding requires
            try:
                data = self.ws.recv(timeout=0.05)
            except TimeoutError:
                data = None
            if data is not None:
                assert isinstance(data, bytes), "AMQP over WebSocket is binary"
                self.transport.push(data)
            if time.monotonic() > deadline:
                raise TimeoutError("the AMQP exchange did not finish")

    def send(self, address: str, body: str) -> None:
        sender = self.session.sender(f"s-{address}")
        sender.target.address = address
        sender.open()
        self.pump(lambda: sender.credit > 0)
        delivery = sender.delivery(b"1")
        sender.send(proton.Message(body=body, durable=True).encode())
        sender.advance()
        self.pump(lambda: delivery.remote_state == proton.Delivery.ACCEPTED)  # after the disk
        delivery.settle()

    def receive(self, address: str) -> proton.Message:
        receiver = self.session.receiver(f"r-{address}")
        receiver.source.address = address
        receiver.open()
        receiver.flow(1)
        self.pump(lambda: receiver.current is not None and not receiver.current.partial)
        delivery = receiver.current
        message = proton.Message()
        message.decode(receiver.recv(delivery.pending))
        if isinstance(message.body, memoryview):  # (a view of proton's buffer: copied while it holds)
            message.body = bytes(message.body)
        delivery.update(proton.Delivery.ACCEPTED)
        delivery.settle()
        receiver.advance()
        return message

    def close(self) -> None:
        self.conn.close()
        self.pump(lambda: self.conn.state & proton.Endpoint.REMOTE_CLOSED)
        self.ws.close()


def test_amqp_over_websocket_round_trip_and_from_stomp_over_websocket(tmp_path):
    from test_websocket import WsBroker, WsStomp

    b = WsBroker(tmp_path / "b")
    ws_port = b.ws_port
    with b:
        a = AmqpOverWebSocket(ws_port)
        a.send("queue://ws.amqp", "over amqp ws")
        assert a.receive("queue://ws.amqp").body == "over amqp ws"
        a.close()

        stomp = WsStomp(ws_port)
        stomp.send("SEND", {"destination": "/queue/ws.stomp2amqp", "persistent": "true", "receipt": "r"},
                   "from stomp")
        assert stomp.frame()[1] == {"receipt-id": "r"}
        stomp.close()
        other = AmqpOverWebSocket(ws_port, path="/amqp")
        body = other.receive("queue://ws.stomp2amqp").body
        assert (body.decode() if isinstance(body, bytes) else body) == "from stomp"
        other.close()
