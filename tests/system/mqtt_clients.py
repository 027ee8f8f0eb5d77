"""MQTT clients for system tests: paho-mqtt 2.x wrapped to hand messages over a queue, and a raw
client on Petrel's own codec for what a library hides (unacknowledged deliveries, resends,
malformed bytes, abrupt ends)."""

from __future__ import annotations

import queue
import socket
import time

import paho.mqtt.client as mqtt

from petrel.codec.mqtt import NEED_DATA, Connect, MqttConnection
from petrel.codec.roles import Role
from petrel.testing.process import BrokerProcess

V311, V5 = mqtt.MQTTv311, mqtt.MQTTv5


def mqtt_settings(port: int) -> str:
    return f"mqtt_port = {port}\n"


class Paho:
    """A connected paho client; `messages` gets every paho MQTTMessage."""

    def __init__(self, port: int, client_id: str = "", *, version=V311, clean: bool = True,
                 expiry: int | None = None, will: tuple | None = None, username: str | None = None,
                 password: str | None = None, wait: bool = True) -> None:
        kwargs = {} if version == V5 else {"clean_session": clean}
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version, **kwargs)
        self.messages: queue.Queue = queue.Queue()
        self.connacks: queue.Queue = queue.Queue()
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_connect = lambda c, u, flags, rc, props: self.connacks.put((flags, rc, props))
        if username is not None:
            self.client.username_pw_set(username, password)
        if will is not None:
            self.client.will_set(*will)
        properties = None
        if version == V5:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            properties = Properties(PacketTypes.CONNECT)
            if expiry is not None:
                properties.SessionExpiryInterval = expiry
        self.client.connect("127.0.0.1", port, keepalive=30,
                            **({"clean_start": clean, "properties": properties} if version == V5 else {}))
        self.client.loop_start()
        if wait:
            self.connack = self.connacks.get(timeout=10)

    def subscribe(self, topic: str, qos: int = 1, **kw) -> None:
        done: queue.Queue = queue.Queue()
        self.client.on_subscribe = lambda c, u, mid, reasons, props: done.put(reasons)
        self.client.subscribe(topic, qos, **kw)
        self.granted = done.get(timeout=10)

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False, properties=None) -> None:
        info = self.client.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(10)

    def get(self, timeout: float = 10.0):
        return self.messages.get(timeout=timeout)

    def drain(self, idle: float = 0.7) -> list:
        out = []
        while True:
            try:
                out.append(self.messages.get(timeout=idle))
            except queue.Empty:
                return out

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Raw:
    """A client speaking through Petrel's codec over a plain socket."""

    def __init__(self, port: int, connect: Connect | None = None, *, level: int = 4) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.codec = MqttConnection(Role.CLIENT)
        if connect is not None:
            self.send(connect)
            self.connack = self.recv()

    def send(self, packet) -> None:
        self.sock.sendall(self.codec.send(packet))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float = 10.0):
        """The next packet; None when the broker closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.codec.next_event()
            if event is not NEED_DATA:
                return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet from the broker")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                return None
            self.codec.receive_data(data)

    def recv_until_closed(self, timeout: float = 10.0) -> list:
        out = []
        while (packet := self.recv(timeout)) is not None:
            out.append(packet)
        return out

    def abort(self) -> None:
        """An abrupt end: RST, no DISCONNECT."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


def mqtt_broker(workdir, port: int | None = None) -> BrokerProcess:
    from petrel.testing.process import free_port

    port = port or free_port()
    b = BrokerProcess(workdir, settings=mqtt_settings(port))
    b.mqtt_port = port  # type: ignore[attr-defined]
    return b
