"""What MQTT keeps across connections and restarts, for one broker.

Three durable last-value queues hold it, so the journal keeps it like any message:

- ``$.petrel.mqtt.sessions``: one message per persistent session (its client id is the last-value
  key): the session expiry interval, its subscriptions (filter, QoS, options, identifier) and
  when it was last disconnected. Its subscription queues (``<client id>.<address>``) are
  ordinary durable multicast queues, so what they hold survives like any message.
- ``$.petrel.mqtt.retain``: one message per retained topic (keyed by its address); a new retained
  PUBLISH replaces it, an empty one removes it.
- ``$.petrel.mqtt.pubrel``: QoS 2 deliveries to a persistent session the client answered with
  PUBREC and has not completed (PUBCOMP), by client id and packet id, so the PUBREL is sent
  again after a restart; it is written in the transaction that acknowledges the message.
- ``$.petrel.mqtt.qos2``: QoS 2 PUBLISHes received and answered with PUBREC, not yet released by
  PUBREL (keyed by client id and packet id). PUBREL routes the message and removes it in one
  store transaction, so a resend after a crash is recognised and never routed twice.
- ``$.petrel.mqtt.sent``: the packet id given to a QoS 1 or 2 delivery of a durable message to a
  persistent session, until the client acknowledges it (keyed by client id and packet id; the
  subscription queue's name and the message id as properties), so that after a restart the
  message is sent again with that packet id and DUP. A QoS 2 PUBLISH is written to the client
  only once its record is durable; PUBREC replaces the record by the ``pubrel`` one and
  acknowledges the message in one store transaction, so a message whose PUBREC was seen is never
  sent again, and one whose PUBREC was not is sent again as the same PUBLISH (exactly once
  through ``kill -9``). A QoS 1 delivery does not wait for its record (a crash in between sends
  it again as new: at least once). PUBACK removes the record before acknowledging the message.
- ``$.petrel.mqtt.wills``: the will of a disconnected persistent session waiting for its will
  delay (keyed by client id; when it is due as a property), so that a broker restarted before
  then publishes it when it is due, unless the session resumed first.

The state is loaded when the broker starts serving, if it holds any (`start`, the protocol's
start hook), else when the first MQTT client connects; a persistent session's expiry counts
from its disconnect, or from the start for one that was connected when the broker went down.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from petrel.codec.mqtt import Subscription
from petrel.core.message import Message, RoutingType, now_ms
from petrel.core.transaction import Transaction
from petrel.core.wildcard import matches
from petrel.server.adapters.mqtt_topics import Filter, parse_filter, queue_name

if TYPE_CHECKING:
    from petrel.core.queue import MessageReference, Queue
    from petrel.server.broker import Broker

__all__ = ["MqttState", "MqttSession", "SessionSubscription", "NEVER", "start"]

log = logging.getLogger("petrel.server.mqtt")

SESSIONS = "$.petrel.mqtt.sessions"
RETAINED = "$.petrel.mqtt.retain"
QOS2 = "$.petrel.mqtt.qos2"
PUBREL = "$.petrel.mqtt.pubrel"
SENT = "$.petrel.mqtt.sent"
WILLS = "$.petrel.mqtt.wills"
WILL_ADDRESS = "_MQTT_WILL_ADDRESS"
WILL_DUE = "_MQTT_WILL_DUE"  # ms since the epoch
WILL_RETAIN = "_MQTT_WILL_RETAIN"
SENT_QUEUE = "_MQTT_SENT_Q"  # on a SENT record: the subscription queue's name
SENT_MESSAGE = "_MQTT_SENT_M"  # on a SENT record: the message id
KEY = "_MQTT_KEY"
RETAINED_TOPIC = "_MQTT_RETAINED"  # on a copy of a retained message routed to a new subscription
NEVER = 0xFFFFFFFF  # session expiry interval: the session never ends
COMPACT_EVERY = 256


@dataclass(slots=True)
class SessionSubscription:
    filter: Filter
    options: Subscription
    identifier: int | None = None
    queue: str = ""


@dataclass(slots=True)
class MqttSession:
    client_id: str
    expiry: int = 0  # seconds after a disconnect; 0: ends with the connection; NEVER
    subscriptions: dict[str, SessionSubscription] = field(default_factory=dict)
    adapter: Any = None  # the connection it is attached to
    pubrel_pending: set[int] = field(default_factory=set)  # QoS 2 out: PUBREC seen, PUBCOMP not yet
    packet_ids: dict[tuple[str, int], int] = field(default_factory=dict)  # (queue name, message id) -> id
    reserved: set[int] = field(default_factory=set)  # packet ids of deliveries to send again
    timer: Any = None  # session expiry
    will_timer: Any = None  # a delayed will: (timer, publish now)
    saved: bytes = b""  # the record last written to $.petrel.mqtt.sessions

    @property
    def persistent(self) -> bool:
        return self.expiry > 0


def start(broker: Broker) -> None:
    """The registry's start hook: sessions from before a restart expire on time even if no
    MQTT client connects."""
    if broker.office is not None and SESSIONS in broker.office.queues:
        MqttState.of(broker)


class MqttState:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.office = broker.office
        self.sessions: dict[str, MqttSession] = {}
        self._loaded = False
        self._finished: dict[str, int] = {}  # per system queue: references finished since the last compaction

    @classmethod
    def of(cls, broker: Broker) -> MqttState:
        state = getattr(broker, "_mqtt_state", None)
        if state is None or state.office is not broker.office:  # (a broker activated again: a new office)
            if state is not None:
                state.forget()
            state = cls(broker)
            broker._mqtt_state = state  # type: ignore[attr-defined]
        state.load()
        return state

    def forget(self) -> None:
        """This state's office is gone (the broker was deactivated): its timers end."""
        for session in self.sessions.values():
            for timer in (session.timer, session.will_timer[0] if session.will_timer else None):
                if timer is not None:
                    timer.cancel()
        self.sessions.clear()

    # -- the system queues -----------------------------------------------------------------

    def _queue(self, name: str) -> Queue:
        queue = self.office.queues.get(name)
        if queue is None:
            creator, self.office.creator = self.office.creator, None
            try:
                queue = self.office.create_queue(name, name, RoutingType.ANYCAST, durable=True,
                                                 attributes={"last_value_key": KEY})
            finally:
                self.office.creator = creator
        return queue

    def _put(self, queue_name_: str, key: str, body: bytes, properties: dict | None = None) -> None:
        """Keep `body` under `key` in a system queue (replacing what was kept under it)."""
        props = dict(properties or {})
        props[KEY] = key
        message = Message(id=self.broker.store.next_id(), address=queue_name_, body=body, properties=props,
                          durable=True, timestamp=now_ms())
        self._send(message)

    def _send(self, message: Message) -> None:
        queue = self._queue(message.address)
        replaced = self._find(message.address, str(message.properties[KEY])) is not None
        self.office.send(message, RoutingType.ANYCAST)
        if replaced:
            self._settled(queue)

    def _find(self, queue_name_: str, key: str) -> MessageReference | None:
        queue = self.office.queues.get(queue_name_)
        if queue is None:
            return None
        ref = queue._last_values.get(key)  # the last-value queue's index by key
        if ref is None or ref.state not in (0, 2):  # AVAILABLE, SCHEDULED
            return None
        return ref

    def _remove(self, ref: MessageReference, tx_id: int = 0) -> None:
        queue = ref.queue
        queue.take(ref)
        queue.messages_acked += 1
        queue._last_values.pop(ref.message.properties.get(KEY), None)
        self.office.reference_done(ref, tx_id)
        self._settled(queue)

    def _settled(self, queue: Queue) -> None:
        """A reference of a system queue was replaced or removed. Nobody consumes these queues,
        so nothing would drop the finished references from its lists: every COMPACT_EVERY of
        them, keep only the live ones (else each replaced session record stays in memory)."""
        self._finished[queue.name] = count = self._finished.get(queue.name, 0) + 1
        if count < COMPACT_EVERY:
            return
        self._finished[queue.name] = 0
        for i, bucket in enumerate(queue._buckets):
            if not bucket:
                continue
            live = deque()
            for ref in bucket:
                if ref.state == 0:  # AVAILABLE
                    live.append(ref)
                else:
                    ref.in_deque = False
            queue._buckets[i] = live

    def sync(self) -> None:
        """Make what was written durable soon (nobody waits for it)."""
        self.broker.store.sync(lambda: None, failed=lambda exc: log.error("MQTT state not persisted: %s", exc))

    # -- sessions -----------------------------------------------------------------------------

    def load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        queue = self.office.queues.get(SESSIONS)
        if queue is None:
            return
        now = now_ms()
        for ref in list(queue.iter_refs()):
            try:
                data = json.loads(ref.message.body)
                session = MqttSession(data["client_id"], int(data["expiry"]))
                for text, qos, nl, rap, rh, ident in data["subs"]:
                    f = parse_filter(text)
                    session.subscriptions[text] = SessionSubscription(
                        f, Subscription(text, qos, nl, rap, rh), ident, queue_name(session.client_id, f))
            except Exception as exc:
                log.error("an MQTT session record that does not load (%s); dropped", exc)
                self._remove(ref)
                continue
            self.sessions[session.client_id] = session
            disconnected = int(data.get("at") or 0) or now
            if session.expiry != NEVER:
                left = max(0.0, (disconnected + session.expiry * 1000 - now) / 1000)
                self.expire_later(session, left)
        released = self.office.queues.get(PUBREL)
        for ref in list(released.iter_refs()) if released is not None else ():
            pid, _, client_id = str(ref.message.properties.get(KEY, "")).partition(":")
            session = self.sessions.get(client_id)
            if session is None or not pid.isdigit():
                self._remove(ref)
            else:
                session.pubrel_pending.add(int(pid))
        sent = self.office.queues.get(SENT)
        for ref in list(sent.iter_refs()) if sent is not None else ():
            pid, _, client_id = str(ref.message.properties.get(KEY, "")).partition(":")
            session = self.sessions.get(client_id)
            props = ref.message.properties
            if session is None or not pid.isdigit() or int(pid) in session.pubrel_pending:
                self._remove(ref)
            else:
                session.packet_ids[(str(props.get(SENT_QUEUE)), int(props.get(SENT_MESSAGE) or 0))] = int(pid)
                session.reserved.add(int(pid))
        wills = self.office.queues.get(WILLS)
        for ref in list(wills.iter_refs()) if wills is not None else ():
            try:
                self._will_from(ref, now)
            except Exception as exc:
                log.error("an MQTT will record that does not load (%s); dropped", exc)
                self._remove(ref)
        log.info("MQTT: %d persistent sessions loaded", len(self.sessions))

    def save(self, session: MqttSession, *, disconnected: bool = False) -> None:
        if not session.persistent:
            return
        subs = [[s.options.filter, s.options.qos, s.options.no_local, s.options.retain_as_published,
                 s.options.retain_handling, s.identifier] for s in session.subscriptions.values()]
        body = json.dumps({"client_id": session.client_id, "expiry": session.expiry, "subs": subs,
                           "at": now_ms() if disconnected else 0}).encode()
        if body == session.saved and self._find(SESSIONS, session.client_id) is not None:
            return
        session.saved = body
        self._put(SESSIONS, session.client_id, body)

    def end(self, session: MqttSession) -> None:
        """The session is over: its subscription queues and its record go."""
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
        for sub in session.subscriptions.values():
            self.drop_queue(sub)
        session.subscriptions.clear()
        ref = self._find(SESSIONS, session.client_id)
        if ref is not None:
            self._remove(ref)
        for pid in list(session.pubrel_pending):
            self.released_done(session.client_id, pid)
        for pid in set(session.packet_ids.values()):
            self.sent_done(session.client_id, pid)
        session.packet_ids.clear()
        session.reserved.clear()
        self.sync()

    def drop_queue(self, sub: SessionSubscription) -> None:
        queue = self.office.queues.get(sub.queue)
        if queue is None or sub.filter.group is not None and queue.consumers:
            return  # a shared subscription's queue stays while other members consume
        try:
            self.office.delete_queue(sub.queue)
        except Exception as exc:  # deleted meanwhile
            log.debug("MQTT subscription queue %s not deleted: %s", sub.queue, exc)

    def expire_later(self, session: MqttSession, seconds: float) -> None:
        if session.timer is not None:
            session.timer.cancel()
        loop = asyncio.get_running_loop()

        def expire() -> None:
            session.timer = None
            if session.adapter is None and self.sessions.get(session.client_id) is session:
                log.info("MQTT session %s expired", session.client_id)
                self.end(session)

        session.timer = loop.call_later(min(seconds, 10 * 365 * 86400), expire)

    # -- wills waiting for their delay ---------------------------------------------------------

    def will_later(self, session: MqttSession, will: Message, retain: bool, delay: float) -> None:
        """Publish `will` in `delay` seconds unless the session resumes first; kept durably
        until then."""
        props = dict(will.properties)
        props[WILL_ADDRESS] = will.address
        props[WILL_DUE] = now_ms() + int(delay * 1000)
        props[WILL_RETAIN] = retain
        props["_MQTT_EXPIRATION"] = will.expiration
        props[KEY] = session.client_id
        self._send(Message(id=self.broker.store.next_id(), address=WILLS, body=will.body, properties=props,
                           durable=True, priority=will.priority, timestamp=will.timestamp))
        self.sync()
        log.info("MQTT will of %s due in %.1fs", session.client_id, delay)
        self._arm_will(session.client_id, will, retain, delay)

    def _will_from(self, ref: MessageReference, now: int) -> None:
        m = ref.message
        props = {k: v for k, v in m.properties.items()
                 if k not in (KEY, WILL_ADDRESS, WILL_DUE, WILL_RETAIN, "_MQTT_EXPIRATION")}
        will = Message(id=self.broker.store.next_id(), address=str(m.properties[WILL_ADDRESS]), body=m.body,
                       properties=props, durable=m.durable, priority=m.priority,
                       expiration=int(m.properties.get("_MQTT_EXPIRATION") or 0), timestamp=m.timestamp)
        delay = max(0.0, (int(m.properties[WILL_DUE]) - now) / 1000)
        self._arm_will(str(m.properties[KEY]), will, bool(m.properties.get(WILL_RETAIN)), delay)

    def _arm_will(self, client_id: str, will: Message, retain: bool, delay: float) -> None:
        session = self.sessions.get(client_id)

        def publish() -> None:
            if session is not None:
                session.will_timer = None
            self.will_done(client_id)
            self.publish_will(client_id, will, retain)

        timer = asyncio.get_running_loop().call_later(min(delay, 10 * 365 * 86400), publish)
        if session is not None:
            session.will_timer = (timer, publish)

    def will_done(self, client_id: str) -> None:
        """The will went, or is not to go (the session resumed): its record goes."""
        ref = self._find(WILLS, client_id)
        if ref is not None:
            self._remove(ref)
            self.sync()

    def publish_will(self, client_id: str, will: Message, retain: bool) -> None:
        try:
            self.office.send(will, None)
            if retain:
                self.retain(will)
            self.sync()
            log.info("MQTT will of %s published to %s", client_id, will.address)
        except Exception as exc:
            log.info("MQTT will of %s not published: %s", client_id, exc)

    # -- retained messages --------------------------------------------------------------------

    def retain(self, message: Message) -> None:
        """Keep `message` as its address's retained message; an empty body clears it."""
        address = message.address
        old = self._find(RETAINED, address)
        if not message.body and message.large is None:
            if old is not None:
                self._remove(old)
            return
        props = dict(message.properties)
        props[RETAINED_TOPIC] = address
        copy = Message(id=self.broker.store.next_id(), address=RETAINED, body=message.body, properties=props,
                       durable=True, priority=message.priority, expiration=message.expiration,
                       timestamp=message.timestamp)
        props[KEY] = address
        self._send(copy)  # replaces the older one (last value)

    def retained_for(self, pattern: str) -> list[Message]:
        """Copies of the retained messages whose address `pattern` matches, for a new subscription."""
        queue = self.office.queues.get(RETAINED)
        if queue is None:
            return []
        now = now_ms()
        out = []
        for ref in queue.iter_refs():
            m = ref.message
            address = m.properties.get(RETAINED_TOPIC)
            if not isinstance(address, str) or (m.expiration and m.expired(now)):
                continue
            if address == pattern or matches(pattern, address):
                props = {k: v for k, v in m.properties.items() if k != KEY}
                out.append(Message(id=self.broker.store.next_id(), address=address, body=m.body,
                                   properties=props, durable=m.durable, priority=m.priority,
                                   expiration=m.expiration, timestamp=m.timestamp))
        return out

    # -- QoS 2 received, not yet released -----------------------------------------------------

    @staticmethod
    def _qos2_key(client_id: str, packet_id: int) -> str:
        return f"{packet_id}:{client_id}"

    def qos2_pending(self, client_id: str, packet_id: int) -> bool:
        return self._find(QOS2, self._qos2_key(client_id, packet_id)) is not None

    def qos2_hold(self, client_id: str, packet_id: int, message: Message) -> None:
        props = dict(message.properties)
        props[RETAINED_TOPIC] = message.address
        props[KEY] = self._qos2_key(client_id, packet_id)
        held = Message(id=message.id, address=QOS2, body=message.body, properties=props, durable=True,
                       priority=message.priority, expiration=0, timestamp=message.timestamp)
        held.properties["_MQTT_EXPIRATION"] = message.expiration
        self._send(held)

    def qos2_release(self, client_id: str, packet_id: int, route) -> bool:
        """PUBREL: route the held message (``route(message, tx)``) and forget it, in one store
        transaction. False when nothing is held under that id (released before)."""
        ref = self._find(QOS2, self._qos2_key(client_id, packet_id))
        if ref is None:
            return False
        m = ref.message
        props = {k: v for k, v in m.properties.items() if k not in (KEY, RETAINED_TOPIC, "_MQTT_EXPIRATION")}
        expiration = m.properties.get("_MQTT_EXPIRATION") or 0
        message = Message(id=self.broker.store.next_id(), address=str(m.properties[RETAINED_TOPIC]), body=m.body,
                          properties=props, durable=True, priority=m.priority,
                          expiration=int(expiration), timestamp=m.timestamp)
        tx = Transaction(f"mqtt-qos2-{client_id}-{packet_id}")
        try:
            route(message, tx)
        except Exception:
            self.office.rollback(tx)
            self._remove(ref)  # refused (PUBCOMP says why): the client will not send it again
            raise
        tx.acks.append(ref)
        ref.queue._last_values.pop(m.properties.get(KEY), None)
        self.office.commit(tx)
        self._settled(ref.queue)
        return True

    def qos2_forget_client(self, client_id: str) -> None:
        """A clean start: QoS 2 messages the old session never released are dropped."""
        queue = self.office.queues.get(QOS2)
        if queue is None:
            return
        suffix = f":{client_id}"
        for ref in [r for r in queue.iter_refs() if str(r.message.properties.get(KEY, "")).endswith(suffix)
                    and str(r.message.properties.get(KEY, "")).split(":", 1)[1] == client_id]:
            self._remove(ref)

    # -- QoS 2 delivered, PUBREC seen, PUBCOMP not yet ----------------------------------------

    def released(self, client_id: str, packet_id: int, ref: MessageReference) -> None:
        """PUBREC for a delivery: the message is acknowledged, its ``sent`` record removed and
        the packet id kept, in one store transaction."""
        key = self._qos2_key(client_id, packet_id)
        record = Message(id=self.broker.store.next_id(), address=PUBREL, body=b"",
                         properties={KEY: key}, durable=True, timestamp=now_ms())
        self._queue(PUBREL)
        tx = Transaction(f"mqtt-pubrec-{client_id}-{packet_id}")
        tx.sends.append((record, RoutingType.ANYCAST))
        tx.hold_ack(ref)
        sent = self._find(SENT, key)
        if sent is not None:
            tx.acks.append(sent)
            sent.queue._last_values.pop(key, None)
        self.office.commit(tx)
        if sent is not None:
            self._settled(sent.queue)

    # -- QoS 1/2 delivered, not yet acknowledged ----------------------------------------------

    def sent(self, client_id: str, packet_id: int, queue_name_: str, message_id: int) -> None:
        """A delivery of a durable message to a persistent session got `packet_id` (replacing
        the record of the delivery that had it before)."""
        self._put(SENT, self._qos2_key(client_id, packet_id), b"",
                  {SENT_QUEUE: queue_name_, SENT_MESSAGE: message_id})

    def sent_done(self, client_id: str, packet_id: int) -> None:
        """PUBACK (or a refusing PUBREC, or the session's end): the record goes."""
        ref = self._find(SENT, self._qos2_key(client_id, packet_id))
        if ref is not None:
            self._remove(ref)

    def released_done(self, client_id: str, packet_id: int) -> None:
        """PUBCOMP: the packet id is free again."""
        ref = self._find(PUBREL, self._qos2_key(client_id, packet_id))
        if ref is not None:
            self._remove(ref)
