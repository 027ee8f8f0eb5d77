"""MQTT 3.1, 3.1.1 and 5.0 on the post office, through the server session.

This module holds the connection: CONNECT (login, client id, clean start and session expiry,
session take-over, keep-alive at 1.5 times the interval), PUBLISH from the client (QoS 0, 1
and 2, retained, topic aliases), PINGREQ, DISCONNECT, will messages and errors.
`mqtt_subscriptions` holds SUBSCRIBE/UNSUBSCRIBE and deliveries; `mqtt_state` what outlives a
connection (sessions, retained messages, QoS 2 packet ids); `mqtt_messages` the conversion of
PUBLISH to and from Petrel messages; `mqtt_topics` the topic <-> address mapping.

A read's consecutive PUBLISHes for one topic (QoS 0 and 1, not retained) are routed together,
in one pass through the post office (`publish_run`), before any other packet is handled: what
clients see is what routing them one by one gives. A PUBACK or PUBREC goes out after the message
is durable: the server session releases confirmations after one store sync per read, in read order. QoS 2 is exactly once: the
PUBLISH is held in ``$.petrel.mqtt.qos2`` and routed at PUBREL, in the transaction that removes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from petrel.codec.mqtt import (
    NEED_DATA,
    Connack,
    Connect,
    Disconnect,
    MqttConnection,
    MqttProtocolError,
    Pingresp,
    PropertyId as P,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    ReasonCode as R,
    v3_connack_code,
)
from petrel.codec.mqtt.codes import PacketType as T
from petrel.core.message import Message
from petrel.core.outcome import SendOutcome
from petrel.security.errors import NotAuthorized as SecurityNotAuthorized
from petrel.server.access import Access
from petrel.server.adapters.mqtt_messages import to_message
from petrel.server.adapters.mqtt_state import NEVER, MqttSession, MqttState
from petrel.server.adapters.mqtt_subscriptions import PUBACK, PUBCOMP, PUBLISH, PUBREC, PUBREL, MqttSubscriptions
from petrel.server.adapters.mqtt_topics import TopicError, topic_to_address
from petrel.server.login import OffLoopLogin
from petrel.server.refusals import NotDurable, Refused
from petrel.server.session import ServerSession

if TYPE_CHECKING:
    from petrel.server.broker import Broker
    from petrel.server.connection import Connection

log = logging.getLogger("petrel.server.mqtt")

TOPIC_ALIAS_MAXIMUM = 64
PUBLISHER = "_MQTT_CLIENT"  # the publishing client's id (for No Local)
RUN_MAX = 4096  # PUBLISHes routed together at most (`publish_run`)
# What a refusal of the session's family is in MQTT 5.
REFUSAL_CODES = {"not-authorized": R.NOT_AUTHORIZED, "address-full": R.QUOTA_EXCEEDED,
                 "routing": R.IMPLEMENTATION_SPECIFIC_ERROR, "not-durable": R.UNSPECIFIED_ERROR}


class MqttAdapter(MqttSubscriptions):
    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        self.codec = MqttConnection(max_packet_size=broker.config.max_frame_size)
        self.access = Access(broker.security)
        self.session = ServerSession(broker, conn, self.access, run=self._run, on_sync_failed=self._not_durable)
        self.state = MqttState.of(broker)
        self.mqtt: MqttSession | None = None  # the MQTT session, once CONNECT is accepted
        self.client_id = ""
        self.v5 = False
        self.connected = False
        self._closing = False
        self.will: Message | None = None
        self.will_delay = 0
        self.will_retain = False
        self.keep_alive = 0
        self._last_read = time.monotonic()
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        self._aliases: dict[int, str] = {}
        self._addresses: dict[str, str] = {}  # topic -> address, for the topics this client publishes to
        self._run_messages: list[Message] = []  # this read's last PUBLISHes for one address, not routed yet
        self._run_publishes: list[Publish] = []  # ... and their packets
        self.problem_info = True  # 5.0 Request Problem Information
        self._login_task = None
        self.init_subscriptions()

    # -- input -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_read = time.monotonic()
        self._run(lambda: self.codec.receive_data(data))

    def _run(self, fn: Callable[[], None]) -> None:
        office, creator = self.office, self.office.creator
        office.creator = self.access.user
        try:
            fn()
            while not self.session.held and not self._closing:
                packet = self.codec.next_event()
                if packet is NEED_DATA:
                    break
                self.handle(packet)
            if self._run_messages:
                self.publish_run()
            if self._resume_due:
                self.resume_deliveries()
        except MqttProtocolError as exc:
            self._publish_run_before_error()
            self.fail(exc.reason, exc.message)
        except Exception as exc:  # never let one client take the broker down
            log.exception("internal error handling an MQTT packet from %s", self.conn.peer)
            self._publish_run_before_error()
            self.fail(R.IMPLEMENTATION_SPECIFIC_ERROR, f"internal error: {exc}")
        finally:
            office.creator = creator
            self.session.flush()

    def handle(self, packet) -> None:
        t = packet.type
        if t == PUBLISH:
            self.on_publish(packet)
            return
        if self._run_messages:  # the PUBLISHes before this packet are routed before it is handled
            self.publish_run()
        if t == PUBACK or t == PUBREC or t == PUBCOMP:
            self.on_delivery_ack(packet)
        elif t == PUBREL:
            self.on_pubrel(packet)
        elif t == T.SUBSCRIBE:
            self.on_subscribe(packet)
        elif t == T.UNSUBSCRIBE:
            self.on_unsubscribe(packet)
        elif t == T.PINGREQ:
            self.write(Pingresp())
        elif t == T.CONNECT:
            self.on_connect(packet)
        elif t == T.DISCONNECT:
            self.on_disconnect(packet)
        else:  # AUTH: no enhanced authentication methods
            self.fail(R.BAD_AUTHENTICATION_METHOD, "no enhanced authentication (AUTH) is supported")

    def write(self, packet) -> None:
        self.conn.write(self.codec.send(packet))

    def confirm(self, packet, *, durable: bool = False, transactional: bool = False) -> None:
        """Write `packet` in read order, after this read's sync when `durable`."""
        self.session.confirm(self.codec.send(packet), durable=durable, transactional=transactional)

    # -- CONNECT ---------------------------------------------------------------------------

    def on_connect(self, c: Connect) -> None:
        self.v5 = c.level >= 5
        if self.access.enabled and self.access.subject is None:
            self._log_in(c)
            return
        client_id = c.client_id
        assigned = None
        if not client_id:
            if not c.clean_start and not self.v5:
                return self.refuse_connect(R.CLIENT_IDENTIFIER_NOT_VALID,
                                           "an empty client id needs clean session (3.1.1)")
            client_id = assigned = f"petrel-{uuid.uuid4().hex}"
        expiry = c.properties.get(P.SESSION_EXPIRY_INTERVAL, 0) if self.v5 else (0 if c.clean_start else NEVER)
        if c.will is not None:
            try:
                will_address = topic_to_address(c.will.topic)
                self.access.send(self.office, will_address, None)
            except TopicError as exc:
                return self.refuse_connect(exc.reason, str(exc))
            except SecurityNotAuthorized as exc:
                return self.refuse_connect(R.NOT_AUTHORIZED, f"will topic: {exc}")
            publish = Publish(c.will.topic, c.will.payload, c.will.qos, c.will.retain,
                              properties=c.will.properties)
            self.will = to_message(publish, self.broker.store.next_id(), will_address, v5=self.v5)
            self.will.properties[PUBLISHER] = client_id
            self.will_retain = c.will.retain
            self.will_delay = c.will.properties.get(P.WILL_DELAY_INTERVAL, 0) if self.v5 else 0
        self.client_id = client_id
        state = self.state
        old = state.sessions.get(client_id)
        if old is not None and old.adapter is not None:
            old.adapter.taken_over()
            old = state.sessions.get(client_id)  # ended with it unless persistent
        if old is not None and old.timer is not None:
            old.timer.cancel()
            old.timer = None
        if old is not None and old.will_timer is not None:
            timer, publish_will = old.will_timer
            timer.cancel()
            old.will_timer = None
            if c.clean_start:  # the old session ends now: its will goes now
                publish_will()
            else:  # back within the will delay, no will
                state.will_done(client_id)
        present = old is not None and not c.clean_start
        if old is not None and not present:
            state.end(old)
        if c.clean_start:
            state.qos2_forget_client(client_id)
        session = old if present else MqttSession(client_id)
        session.expiry = expiry
        session.adapter = self
        state.sessions[client_id] = session
        self.mqtt = session
        self.connected = True
        self.keep_alive = c.keep_alive
        self.problem_info = c.properties.get(P.REQUEST_PROBLEM_INFORMATION, 1) == 1
        props: dict = {}
        if self.v5:
            self.configure_delivery(c.properties.get(P.RECEIVE_MAXIMUM, 65535),
                                    c.properties.get(P.MAXIMUM_PACKET_SIZE))
            if assigned:
                props[P.ASSIGNED_CLIENT_IDENTIFIER] = assigned
            props[P.TOPIC_ALIAS_MAXIMUM] = TOPIC_ALIAS_MAXIMUM
            props[P.MAXIMUM_PACKET_SIZE] = self.codec.max_packet_size
        else:
            self.configure_delivery(None, None)
        state.save(session)
        self.confirm(Connack(0, present, props), durable=session.persistent)
        self._watch_keep_alive()
        if present:
            self.session.confirm(self.resume_session)
        log.debug("MQTT %s connected (level %d, %s session)", client_id, c.level,
                  "resumed" if present else "new")

    def refuse_connect(self, reason: R, why: str) -> None:
        log.info("MQTT CONNECT from %s refused: %s", self.conn.peer, why)
        code = reason if self.v5 else v3_connack_code(reason)
        props = {P.REASON_STRING: why[:200]} if self.v5 else {}
        self.conn.write(self.codec.send(Connack(code, False, props)))
        self.will = None
        self.close()

    def _log_in(self, c: Connect) -> None:
        password = c.password.decode("utf-8", "replace") if c.password is not None else None
        refused = R.BAD_USER_NAME_OR_PASSWORD if c.username is not None else R.NOT_AUTHORIZED
        self._login_task = OffLoopLogin(
            self.session, self.access, self.broker, self.conn, c.username, password,
            on_success=lambda: self.on_connect(c),
            on_refused=lambda why: self.refuse_connect(refused, why),
            on_error=lambda why: self.refuse_connect(R.SERVER_UNAVAILABLE, why),
            log=log)

    def _watch_keep_alive(self) -> None:
        if not self.keep_alive:
            return
        limit = self.keep_alive * 1.5

        def check() -> None:
            if self.conn.closed or self._closing:
                return
            silent = time.monotonic() - self._last_read
            if silent > limit and not self.session.held and not self.session.blocked:
                log.info("MQTT %s: no packet for %.1fs (keep alive %ds): closing", self.client_id, silent,
                         self.keep_alive)
                self.fail(R.KEEP_ALIVE_TIMEOUT, "keep alive timeout")
                return
            self._keep_alive_timer = self.conn.call_later(max(0.05, limit - silent), check)

        self._keep_alive_timer = self.conn.call_later(limit, check)

    # -- PUBLISH from the client -----------------------------------------------------------

    def on_publish(self, p: Publish) -> None:
        topic = p.topic
        if self.v5 and P.TOPIC_ALIAS in p.properties:
            alias = p.properties[P.TOPIC_ALIAS]
            if not 0 < alias <= TOPIC_ALIAS_MAXIMUM:
                raise MqttProtocolError(f"topic alias {alias} (the maximum is {TOPIC_ALIAS_MAXIMUM})",
                                        R.TOPIC_ALIAS_INVALID)
            if topic:
                self._aliases[alias] = topic
            else:
                topic = self._aliases.get(alias, "")
                if not topic:
                    raise MqttProtocolError(f"topic alias {alias} names no topic yet", R.PROTOCOL_ERROR)
        address = self._addresses.get(topic)
        if address is None:
            try:
                address = topic_to_address(topic)
            except TopicError as exc:
                return self.refuse_publish(p, exc.reason, str(exc))
            if len(self._addresses) >= 1024:
                self._addresses.clear()
            self._addresses[topic] = address
        if self.v5 and p.properties.get(P.PAYLOAD_FORMAT_INDICATOR) == 1:
            try:
                p.payload.decode("utf-8")
            except UnicodeDecodeError:
                return self.refuse_publish(p, R.PAYLOAD_FORMAT_INVALID, "the payload is marked UTF-8 and is not")
        if p.qos == 2 and self.state.qos2_pending(self.client_id, p.packet_id):
            if self._run_messages:
                self.publish_run()
            self.confirm(Pubrec(p.packet_id), durable=True)  # a resend: held already
            return
        message = to_message(p, self.broker.store.next_id(), address, v5=self.v5)
        message.properties[PUBLISHER] = self.client_id
        if p.qos < 2 and not p.retain and self.office.grouping is None:
            run = self._run_messages  # routed together at the end of the run (`publish_run`)
            if run and (run[0].address != address or len(run) >= RUN_MAX):
                self.publish_run()
                run = self._run_messages
            run.append(message)
            self._run_publishes.append(p)
            return
        if self._run_messages:
            self.publish_run()
        if p.qos != 2:
            self._send_one(p, message)
            return
        try:
            self.hold_qos2(p, message)
        except Refused as exc:
            self.refuse_publish(p, REFUSAL_CODES.get(exc.kind, R.UNSPECIFIED_ERROR), str(exc))

    def publish_run(self) -> None:
        """Route the PUBLISHes (QoS 0 and 1, not retained) collected for one address, in order:
        in one pass through the office when it can (`ServerSession.send_run`), else one by one.
        Their PUBACKs are confirmed in order, after the read's sync, as one by one."""
        messages, publishes = self._run_messages, self._run_publishes
        self._run_messages, self._run_publishes = [], []
        result = self.session.send_run(messages, None) if len(messages) > 1 else None
        if result is not None:
            if self.v5 and result.outcome == SendOutcome.UNROUTED:
                for p in publishes:
                    if p.qos == 1:
                        self._published(p, result, False)
                return
            confirm, ack = self.session.confirmations.add, self.codec.ack  # (`_published`, inlined)
            for p, message in zip(publishes, messages):
                if p.qos == 1:  # (its consumption may confirm it before the sync: `Confirmations`)
                    confirm(ack(PUBACK, p.packet_id), True, False, message)
            return
        for p, message in zip(publishes, messages):
            if self._closing:  # a refusal closed the connection: the rest is not handled
                break
            self._send_one(p, message)

    def _send_one(self, p: Publish, message: Message) -> None:
        """Route one QoS 0 or 1 PUBLISH's message, then answer it."""
        try:
            retain = p.retain
            if p.qos or retain:
                self.session.send(message, None, then=lambda result: self._published(p, result, retain, message))
            else:  # QoS 0, not retained: nothing follows the routing
                self.session.send(message, None)
        except Refused as exc:
            self.refuse_publish(p, REFUSAL_CODES.get(exc.kind, R.UNSPECIFIED_ERROR), str(exc))

    def _publish_run_before_error(self) -> None:
        """The PUBLISHes read before a bad packet are routed, as they were handled before it."""
        if self._run_messages:
            try:
                self.publish_run()
            except Exception:
                log.exception("internal error routing MQTT PUBLISHes from %s", self.conn.peer)

    def _published(self, p: Publish, result, retain: bool, message: Message | None = None) -> None:
        if retain:
            self.state.retain(message)
        if p.qos == 1:
            if self.v5 and result.outcome == SendOutcome.UNROUTED:
                self.confirm(Puback(p.packet_id, R.NO_MATCHING_SUBSCRIBERS), durable=True)
            else:  # (a retained one waits for its retained record's sync)
                self.session.confirm(self.codec.ack(PUBACK, p.packet_id), durable=True,
                                     sent=None if retain else message)

    def hold_qos2(self, p: Publish, message: Message) -> None:
        """QoS 2, step one: checked and held durably, answered with PUBREC (routed at PUBREL)."""
        try:
            self.access.send(self.office, message.address, None)
        except SecurityNotAuthorized as exc:
            self.refuse_publish(p, R.NOT_AUTHORIZED, str(exc))
            return
        self.state.qos2_hold(self.client_id, p.packet_id, message)
        self.session.confirm(self.codec.ack(T.PUBREC, p.packet_id), durable=True)

    def on_pubrel(self, packet) -> None:
        """QoS 2, step two: route the held message and forget it, in one store transaction."""
        pid = packet.packet_id
        retained: list[Message] = []

        def route(message: Message, tx) -> None:
            self.session.send(message, None, tx)
            if message.properties.get("_MQTT_RETAIN"):
                retained.append(message)

        try:
            self.state.qos2_release(self.client_id, pid, route)
        except Refused as exc:
            self.confirm(Pubcomp(pid, REFUSAL_CODES.get(exc.kind, R.UNSPECIFIED_ERROR) if self.v5 else 0))
            return
        for message in retained:
            self.state.retain(message)
        self.session.confirm(self.codec.ack(T.PUBCOMP, pid), durable=True, transactional=True)

    def refuse_publish(self, p: Publish, reason: R, why: str) -> None:
        if self._run_messages:  # the PUBLISHes before it first
            self.publish_run()
        log.info("MQTT PUBLISH from %s to %r refused: %s", self.client_id, p.topic, why)
        if not self.v5:
            self.fail(reason, why)  # 3.1.1 cannot say no: the connection closes
        elif p.qos == 1:
            self.confirm(Puback(p.packet_id, reason, self._problem(why)))
        elif p.qos == 2:
            self.confirm(Pubrec(p.packet_id, reason, self._problem(why)))
        elif reason in (R.TOPIC_NAME_INVALID, R.NOT_AUTHORIZED):
            self.fail(reason, why)

    def _problem(self, why: str) -> dict:
        """A reason string for an acknowledgement, unless the client asked for none (5.0's
        Request Problem Information 0)."""
        return {P.REASON_STRING: why[:200]} if self.problem_info else {}

    # -- the end -----------------------------------------------------------------------------

    def on_disconnect(self, d: Disconnect) -> None:
        if self.v5 and P.SESSION_EXPIRY_INTERVAL in d.properties and self.mqtt is not None:
            expiry = d.properties[P.SESSION_EXPIRY_INTERVAL]
            if expiry and not self.mqtt.expiry:
                raise MqttProtocolError("a session expiry set at DISCONNECT after 0 at CONNECT", R.PROTOCOL_ERROR)
            self.mqtt.expiry = expiry
        if not (self.v5 and d.reason == R.DISCONNECT_WITH_WILL):
            self.will = None
        self._closing = True
        self.session.confirm(self.close)

    def taken_over(self) -> None:
        """Another connection with this client id: this one ends now (its will as on any end
        without DISCONNECT: after its delay, unless the new connection resumes the session)."""
        if self.v5 and not self.conn.closed:
            self.write(Disconnect(R.SESSION_TAKEN_OVER))
        self.detach()
        self.close()

    def fail(self, reason: R, why: str) -> None:
        log.info("MQTT error for %s (%s): %s", self.client_id or self.conn.peer, reason.name, why)
        if not self.connected:
            # a CONNECT that was read (or whose level is not spoken here) gets a CONNACK saying why
            if (self.codec.level is not None or reason == R.UNSUPPORTED_PROTOCOL_VERSION) \
                    and not self.codec.connected_out:
                try:
                    self.refuse_connect(reason, why)
                    return
                except Exception:
                    pass
        elif self.v5 and not self.conn.closed:
            try:
                self.write(Disconnect(reason, {P.REASON_STRING: why[:200]}))
            except Exception:
                pass
        self.close()

    def error(self, message: str) -> None:
        """A broker limit closes this connection (`petrel.server.limits.refuse`)."""
        self.fail(R.QUOTA_EXCEEDED, message)

    def _not_durable(self, error: NotDurable) -> None:
        self.fail(R.UNSPECIFIED_ERROR, str(error))

    def close(self) -> None:
        self._closing = True
        self.conn.close()

    def connection_lost(self) -> None:
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
        if self._login_task is not None:
            self._login_task.cancel()
        self.detach()

    def detach(self) -> None:
        """Leave the MQTT session (it lives on when persistent) and publish the will."""
        self._closing = True
        self.release_subscriptions()
        self.session.release()
        session, self.mqtt = self.mqtt, None
        if session is not None and session.adapter is self:
            session.adapter = None
            if not session.persistent:
                self.state.end(session)
            else:
                self.state.save(session, disconnected=True)
                if session.expiry != NEVER:
                    self.state.expire_later(session, session.expiry)
                self.state.sync()
        will, self.will = self.will, None
        if will is not None:
            self._schedule_will(will, session)

    def _schedule_will(self, will: Message, session: MqttSession | None) -> None:
        delay = self.will_delay
        if session is not None and session.persistent:
            delay = min(delay, session.expiry)
        else:
            delay = 0
        if delay <= 0 or session is None:
            self.state.publish_will(self.client_id, will, self.will_retain)
        else:  # kept durably: a restart before it is due publishes it when it is
            self.state.will_later(session, will, self.will_retain, delay)
