"""The chaos run's MQTT 5 channels (paho-mqtt), behind the interface of `channels`.

MQTT speaks topics only, so an MQTT run's destination is the durable topic: each consumer is a
persistent session (clean start off, a session that outlives the connection) whose
subscription is the queue ``<client id>.chaos.t``. A producer publishes at QoS 1 when the plan's
messages are persistent (its batch returns once every PUBACK came, each sent after the message
was durable) and at QoS 0 otherwise (never confirmed: MQTT says nothing back). Message groups
and duplicate IDs travel as MQTT 5 user properties (``JMSXGroupID``, ``_AMQ_DUPL_ID``), which
the broker reads as the message's properties; MQTT has no priority, delay or transaction, so a
plan that asks for those sends without them (the plan maps ``transacted`` to
``client-individual`` for MQTT).

Acknowledgements: a PUBACK from the client is answered by nothing, so a consumer's
acknowledgements are only ever *sent* in the ledger. ``auto`` lets paho acknowledge each
message as its callback returns; the other modes acknowledge a batch when the worker says so.
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
from itertools import count

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from petrel.testing.chaos.channels import ChannelError, Delivery, Spec, body_mid

__all__ = ["TOPIC_FILTER", "mqtt_consumer", "mqtt_producer", "subscription_queue"]

TIMEOUT = 60.0
SESSION_EXPIRY = 3600  # s a consumer's session outlives its connection
TOPIC_FILTER = "chaos/t"  # the address chaos.t
_ids = count()


def subscription_queue(client_id: str) -> str:
    """The broker's queue of a persistent session's subscription to `TOPIC_FILTER`."""
    return f"{client_id}.chaos.t"


class _Client:
    """A paho client with its network loop on a thread of its own, and the outcome of CONNECT."""

    def __init__(self, port: int, client_id: str, login: tuple[str, str] | None, *, clean: bool,
                 manual_ack: bool = False, on_message=None) -> None:
        self.cond = threading.Condition()
        self.connected = False
        self.refused: str | None = None
        self.closed = False
        self.acks: dict[int, int] = {}  # mid -> PUBACK reason code
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5,
                        manual_ack=manual_ack)
        if login is not None:
            c.username_pw_set(*login)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        if on_message is not None:
            c.on_message = on_message
        self.client = c
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0 if clean else SESSION_EXPIRY
        try:
            c.connect("127.0.0.1", port, keepalive=30, clean_start=clean, properties=props)
        except OSError as exc:
            raise ChannelError(f"cannot connect: {exc!r}") from None
        c.loop_start()
        self.wait(lambda: self.connected, 15, "CONNACK")

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        with self.cond:
            if reason_code.is_failure:
                self.refused = str(reason_code)
            else:
                self.connected = True
            self.cond.notify_all()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:
        with self.cond:
            self.acks[mid] = reason_code.value if hasattr(reason_code, "value") else int(reason_code)
            self.cond.notify_all()

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: predicate() or self.refused or self.closed, timeout)
            if predicate():
                return
            if self.refused:
                raise ChannelError(f"MQTT refused: {self.refused}")
            if self.closed:
                raise ChannelError(f"connection lost waiting for {what}")
            if not ok:
                raise ChannelError(f"no {what} within {timeout:.0f}s")

    def abort(self) -> None:
        """Drop the connection at once (a TCP reset): no DISCONNECT, so a will would fire."""
        sock = self.client.socket()
        if isinstance(sock, socket.socket):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._stop()

    def close(self) -> None:
        try:
            if self.connected and not self.closed:
                self.client.disconnect()
        except Exception:  # noqa: BLE001 - going away anyway
            pass
        self._stop()

    def _stop(self) -> None:
        try:
            self.client.loop_stop()
        except Exception:  # noqa: BLE001
            pass
        try:
            sock = self.client.socket()
            if sock is not None:
                sock.close()
        except Exception:  # noqa: BLE001
            pass


class mqtt_producer:
    def __init__(self, port: int, destination: str, transacted: bool, confirmed, *,
                 login: tuple[str, str] | None = None) -> None:
        self.confirmed = confirmed
        self.c = _Client(port, f"chaos-p{next(_ids)}", login, clean=True)

    def send(self, batch: list[Spec]) -> None:
        c = self.c
        waiting: dict[int, Spec] = {}
        for spec in batch:
            props = Properties(PacketTypes.PUBLISH)
            users = []
            if spec.group is not None:
                users.append(("JMSXGroupID", spec.group))
            if spec.duplicate_id is not None:
                users.append(("_AMQ_DUPL_ID", spec.duplicate_id))
            if users:
                props.UserProperty = users
            qos = 1 if spec.durable else 0
            try:
                info = c.client.publish(TOPIC_FILTER, spec.body, qos=qos, properties=props)
            except Exception as exc:  # noqa: BLE001
                raise ChannelError(f"publish failed: {exc!r}") from None
            if info.rc != mqtt.MQTT_ERR_SUCCESS:
                raise ChannelError(f"publish failed: {mqtt.error_string(info.rc)}")
            if qos:
                waiting[info.mid] = spec
        if not waiting:
            return  # QoS 0: nothing comes back, the sends stay in doubt
        c.wait(lambda: all(mid in c.acks for mid in waiting), TIMEOUT, "PUBACK")
        with c.cond:
            codes = {mid: c.acks.pop(mid) for mid in waiting}
        refused = [code for code in codes.values() if code >= 0x80]
        if refused:
            raise ChannelError(f"{len(refused)} publishes refused (reason code 0x{refused[0]:02x})")
        self.confirmed([waiting[mid].mid for mid in sorted(waiting)])

    def abort(self) -> None:
        self.c.abort()

    def close(self) -> None:
        self.c.close()


class mqtt_consumer:
    def __init__(self, port: int, destination: str, mode: str, *, client_id: str | None,
                 subscription: str | None, on_delivery, on_ack_confirmed,
                 login: tuple[str, str] | None = None) -> None:
        if client_id is None:
            raise ValueError("an MQTT consumer of a chaos run is a persistent session: it needs a client id")
        self.mode = mode
        self.on_delivery = on_delivery
        self.deliveries: queue.Queue = queue.Queue()
        self.c = _Client(port, client_id, login, clean=False, manual_ack=mode != "auto",
                         on_message=self._message)
        subscribed = threading.Event()

        def on_subscribe(*args) -> None:
            with self.c.cond:
                subscribed.set()
                self.c.cond.notify_all()

        self.c.client.on_subscribe = on_subscribe
        rc, _ = self.c.client.subscribe(TOPIC_FILTER, qos=1)
        if rc != mqtt.MQTT_ERR_SUCCESS:
            self.c.abort()
            raise ChannelError(f"subscribe failed: {mqtt.error_string(rc)}")
        self.c.wait(subscribed.is_set, TIMEOUT, "SUBACK")

    def _message(self, client, userdata, message) -> None:
        d = Delivery(body_mid(message.payload), bool(message.dup), (message.mid, message.qos))
        self.on_delivery(d)
        self.deliveries.put(d)

    def receive(self, timeout: float) -> Delivery | None:
        try:
            return self.deliveries.get(timeout=timeout)
        except queue.Empty:
            if self.c.closed:
                raise ChannelError("connection lost waiting for a message") from None
            return None

    def ack(self, batch: list[Delivery], sent) -> None:
        if self.mode == "auto" or not batch:
            return
        sent(batch)
        for d in batch:
            mid, qos = d.handle
            if qos:
                rc = self.c.client.ack(mid, qos)
                if rc != mqtt.MQTT_ERR_SUCCESS:
                    raise ChannelError(f"PUBACK failed: {mqtt.error_string(rc)}")

    def abort(self) -> None:
        self.c.abort()

    def close(self) -> None:
        self.c.close()
