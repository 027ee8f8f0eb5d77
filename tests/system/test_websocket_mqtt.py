"""MQTT over WebSocket against real `petrel run` processes, with paho-mqtt's websockets transport:
3.1.1 and 5 over ws://host:port/mqtt (and /), to and from MQTT over TCP; runs once the MQTT
adapter is in the protocol registry."""

from __future__ import annotations

import queue
import socket

import pytest

from petrel.server import protocols
from petrel.testing.process import wait_for
from test_websocket import WsBroker, WsStomp

paho = pytest.importorskip("paho.mqtt.client")

pytestmark = [pytest.mark.system,
              pytest.mark.skipif("mqtt" not in protocols.names(), reason="no MQTT adapter in the registry yet")]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = WsBroker(tmp_path_factory.mktemp("ws-mqtt") / "b").start()
    yield b
    b.kill9()


class Client:
    """A paho client on its own network thread; what it receives lands in `messages`."""

    def __init__(self, port: int, *, websocket: bool, client_id: str, version=None, path: str = "/mqtt",
                 clean: bool = True) -> None:
        version = paho.MQTTv311 if version is None else version
        self.messages: queue.Queue = queue.Queue()
        self.connected: queue.Queue = queue.Queue()
        self.acked: queue.Queue = queue.Queue()
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version,
                             transport="websockets" if websocket else "tcp",
                             **({} if version == paho.MQTTv5 else {"clean_session": clean}))
        if websocket:
            self.c.ws_set_options(path=path)
        self.c.on_connect = lambda c, u, flags, reason, props: self.connected.put(reason)
        self.c.on_message = lambda c, u, m: self.messages.put(m)
        self.c.on_subscribe = lambda c, u, mid, reasons, props: self.acked.put(("sub", mid))
        self.c.on_publish = lambda c, u, mid, reason, props: self.acked.put(("pub", mid))
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        reason = self.connected.get(timeout=10)
        assert not reason.is_failure, reason

    def subscribe(self, topic: str, qos: int = 1) -> None:
        _, mid = self.c.subscribe(topic, qos)
        assert self.acked.get(timeout=10) == ("sub", mid)

    def publish(self, topic: str, payload: bytes, qos: int = 1) -> None:
        info = self.c.publish(topic, payload, qos=qos)
        info.wait_for_publish(timeout=10)
        assert info.is_published()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


@pytest.mark.parametrize("version, path", [(None, "/mqtt"), ("5", "/")], ids=["3.1.1-/mqtt", "5-/"])
def test_mqtt_over_websocket_to_and_from_mqtt_over_tcp(broker, version, path):
    v = paho.MQTTv311 if version is None else paho.MQTTv5
    ws = Client(broker.ws_port, websocket=True, client_id=f"ws-{version}", version=v, path=path)
    tcp = Client(broker.port, websocket=False, client_id=f"tcp-{version}", version=v)
    ws.subscribe(f"ws{version}/in")
    tcp.subscribe(f"ws{version}/out")
    tcp.publish(f"ws{version}/in", b"tcp to ws")
    ws.publish(f"ws{version}/out", b"ws to tcp " + bytes(range(256)))  # binary, any byte
    got = ws.messages.get(timeout=10)
    assert (got.topic, got.payload) == (f"ws{version}/in", b"tcp to ws")
    got = tcp.messages.get(timeout=10)
    assert (got.topic, got.payload) == (f"ws{version}/out", b"ws to tcp " + bytes(range(256)))
    ws.close()
    tcp.close()


def test_an_mqtt_client_on_the_stomp_path_is_refused(broker):
    s = socket.create_connection(("127.0.0.1", broker.ws_port), timeout=10)
    s.sendall(b"GET /stomp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
              b"Sec-WebSocket-Protocol: mqtt\r\n\r\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 400 ")
    s.close()
    wait_for(lambda: "WebSocket handshake refused" in broker.log(), 10)


def test_a_persistent_session_over_websocket_keeps_its_messages_through_kill9(tmp_path):
    b = WsBroker(tmp_path / "b")
    ws_port = b.ws_port
    with b:
        def durable() -> Client:
            return Client(ws_port, websocket=True, client_id="ws-durable", clean=False)

        first = durable()
        first.subscribe("ws/durable")
        first.close()
        tcp = Client(b.port, websocket=False, client_id="ws-durable-producer")
        for i in range(5):
            tcp.publish("ws/durable", b"kept %d" % i)
        tcp.close()
        b.kill9()
        b.start()
        again = durable()
        got = sorted(again.messages.get(timeout=15).payload for _ in range(5))
        assert got == [b"kept %d" % i for i in range(5)]
        again.close()


def test_stomp_and_mqtt_over_websocket_reach_each_other(broker):
    mqtt_ws = Client(broker.ws_port, websocket=True, client_id="ws-cross")
    mqtt_ws.subscribe("ws/cross")
    stomp_ws = WsStomp(broker.ws_port)
    stomp_ws.send("SUBSCRIBE", {"id": "1", "destination": "/topic/ws.back", "ack": "auto"})
    stomp_ws.send("SEND", {"destination": "/topic/ws.cross", "receipt": "r"}, "stomp to mqtt")
    assert stomp_ws.frame()[1] == {"receipt-id": "r"}
    got = mqtt_ws.messages.get(timeout=10)
    assert (got.topic, got.payload) == ("ws/cross", b"stomp to mqtt")
    mqtt_ws.publish("ws/back", b"mqtt to stomp")
    command, headers, body = stomp_ws.frame()
    assert (command, body) == ("MESSAGE", "mqtt to stomp")
    stomp_ws.close()
    mqtt_ws.close()
