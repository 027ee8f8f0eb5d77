"""MQTT subscriptions: SUBSCRIBE, UNSUBSCRIBE, deliveries and the client's PUBACK, PUBREC and
PUBCOMP. A mixin of `MqttAdapter`.

Each topic filter is a multicast queue on its address (a pattern address for ``+`` and ``#``):
``<client id>.<address>``, durable when the session outlives the connection, temporary
otherwise; ``$share/<group>/<filter>`` is one queue ``$share.<group>.<address>`` whose
consumers (the group's members) share its messages. A delivery's QoS is the lower of the
subscription's and the message's; a QoS 0 delivery is acknowledged as it is written, a QoS 1
one at PUBACK, a QoS 2 one at PUBREC (then PUBREL, PUBCOMP). The client's receive maximum
bounds the QoS 1 and 2 deliveries in flight over all its subscriptions. Retained messages
matching a new subscription are routed into its queue after the SUBACK.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

from petrel.codec.mqtt import (
    MqttLocalError,
    MqttProtocolError,
    PropertyId as P,
    Pubrel,
    ReasonCode as R,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from petrel.codec.mqtt.codes import PacketType as T
from petrel.cluster.internal_names import internal_name_problem
from petrel.core.message import RoutingType
from petrel.core.queue import Consumer, MessageReference
from petrel.security.errors import NotAuthorized as SecurityNotAuthorized
from petrel.server.refusals import NotAuthorized
from petrel.codec.mqtt.wire import encode_str
from petrel.server.adapters.mqtt_messages import message_qos, static_properties, to_publish
from petrel.server.adapters.mqtt_state import RETAINED_TOPIC, SessionSubscription
from petrel.server.adapters.mqtt_topics import TopicError, address_to_topic, parse_filter, queue_name

if TYPE_CHECKING:
    from petrel.core.queue import Queue
    from petrel.server.adapters.mqtt import MqttAdapter

log = logging.getLogger("petrel.server.mqtt")

V3_RECEIVE_MAXIMUM = 1000  # QoS 1/2 deliveries in flight to a 3.1.1 client
# The packet types of the hot path as plain ints: a comparison with an IntEnum member read from
# its class costs about ten times more (Python 3.11's enum attribute access).
PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = (int(t) for t in (T.PUBLISH, T.PUBACK, T.PUBREC, T.PUBREL, T.PUBCOMP))


class MqttSubscriptions:
    def init_subscriptions(self: MqttAdapter) -> None:
        self.by_consumer: dict[int, SessionSubscription] = {}
        self.consumers: dict[str, Consumer] = {}  # filter -> consumer
        self.inflight: dict[int, tuple[Consumer | None, MessageReference | None]] = {}
        self.receive_max = V3_RECEIVE_MAXIMUM
        self.client_max_packet: int | None = None
        self._next_pid = 1
        self._window_full = False
        self._resume_due = False  # the window opened during this read: resume at its end
        self._topics: dict[str, tuple[str, bytes]] = {}  # address -> topic and its encoding, for deliveries
        self._head0: tuple = (None, 0, False, b"")  # the last QoS 0 delivery's: topic, payload size, retain, header
        self._held: deque[list] = deque()  # [chunks, ready, sync asked]: output waiting for a sync

    def configure_delivery(self: MqttAdapter, receive_max: int | None, max_packet: int | None) -> None:
        self.receive_max = receive_max or V3_RECEIVE_MAXIMUM
        self.client_max_packet = max_packet

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------

    def on_subscribe(self: MqttAdapter, s: Subscribe) -> None:
        session = self.mqtt
        ident = None
        if self.v5 and P.SUBSCRIPTION_IDENTIFIER in s.properties:
            ident = s.properties[P.SUBSCRIPTION_IDENTIFIER][0]
        reasons = []
        attach = []
        for option in s.subscriptions:
            try:
                f = parse_filter(option.filter)
            except TopicError as exc:
                log.info("MQTT SUBSCRIBE of %s refused: %s", self.client_id, exc)
                reasons.append(exc.reason if self.v5 else 0x80)
                continue
            if f.group is not None and option.no_local:
                raise MqttProtocolError("No Local on a shared subscription", R.PROTOCOL_ERROR)
            sub = SessionSubscription(f, option, ident, queue_name(self.client_id, f))
            existed = option.filter in session.subscriptions
            try:
                queue = self._open_queue(sub, session.persistent)
            except (SecurityNotAuthorized, NotAuthorized) as exc:
                log.info("MQTT SUBSCRIBE of %s to %r refused: %s", self.client_id, option.filter, exc)
                reasons.append(R.NOT_AUTHORIZED if self.v5 else 0x80)
                continue
            except Exception as exc:
                log.info("MQTT SUBSCRIBE of %s to %r refused: %s", self.client_id, option.filter, exc)
                reasons.append(R.IMPLEMENTATION_SPECIFIC_ERROR if self.v5 else 0x80)
                continue
            session.subscriptions[option.filter] = sub
            reasons.append(option.qos)
            retained = f.group is None and (option.retain_handling == 0 or
                                            (option.retain_handling == 1 and not existed))
            attach.append((sub, queue, retained))
        self.state.save(session)
        self.confirm(Suback(s.packet_id, tuple(reasons)), durable=session.persistent)
        if attach:
            self.session.confirm(lambda: self._attach_all(attach))

    def _open_queue(self: MqttAdapter, sub: SessionSubscription, durable: bool) -> Queue:
        office = self.office
        if (refused := internal_name_problem(self, sub.filter.address)) is not None:  # $.petrel.*
            raise NotAuthorized(refused)
        queue = office.queues.get(sub.queue)
        self.access.subscribe(office, sub.filter.address, RoutingType.MULTICAST,
                              durable_queue=sub.queue if durable else None)
        if queue is not None and not queue.deleted:
            return queue
        with office.names_from_elsewhere():  # a pattern address and its queue (names checked by mqtt_topics)
            office.ensure_address_for(sub.filter.address, RoutingType.MULTICAST)
            return office.create_queue(sub.queue, sub.filter.address, RoutingType.MULTICAST, durable=durable,
                                       temporary=not durable, client_id=self.client_id,
                                       subscription=sub.filter.text)

    def _attach_all(self: MqttAdapter, attach) -> None:
        if self._closing or self.conn.closed:
            return
        for sub, queue, retained in attach:
            queue = self._attach(sub, queue)
            if retained and queue is not None:
                for message in self.state.retained_for(sub.filter.address):
                    self.office.route_to(message, [queue], 0)

    def _attach(self: MqttAdapter, sub: SessionSubscription, queue: Queue) -> Queue | None:
        """Consume `queue` for `sub`. A SUBSCRIBE again of a filter this connection consumes
        already (a paho application subscribes in on_connect, after its session resumed) only
        updates the options: the consumer stays, with its deliveries in flight, which are
        neither lost nor sent twice (MQTT 5 §3.8.4). A consumer of another queue for the same
        filter goes only after the new one is in place, so a temporary queue is not deleted in
        between and what it held comes to the new one."""
        if queue.deleted:  # deleted meanwhile: made again
            try:
                queue = self._open_queue(sub, self.mqtt.persistent)
            except Exception as exc:
                log.info("MQTT %s: subscription %r lost: %s", self.client_id, sub.options.filter, exc)
                return None
        current = self.consumers.get(sub.options.filter)
        if current is not None and current.queue is queue and not current.closed:
            self.by_consumer[current.id] = sub  # the new options, from the next delivery on
            return queue
        consumer = Consumer(queue, self._deliver, window=self.receive_max)
        self.session.add_consumer(consumer)
        if self._window_full:
            consumer.paused = True
        old = self.consumers.get(sub.options.filter)
        self.consumers[sub.options.filter] = consumer
        self.by_consumer[consumer.id] = sub
        queue.add_consumer(consumer)
        if old is not None:
            self.by_consumer.pop(old.id, None)
            for pid, (c, _) in list(self.inflight.items()):
                if c is old:  # back to the queue with the old consumer: no acknowledgement expected
                    del self.inflight[pid]
            self.session.remove_consumer(old)
        return queue

    def resume_session(self: MqttAdapter) -> None:
        """A persistent session resumed: its subscriptions consume again; PUBRELs go out again."""
        session = self.mqtt
        if session is None:
            return
        for pid in sorted(session.pubrel_pending):
            self.write(Pubrel(pid))
        for sub in list(session.subscriptions.values()):
            try:
                queue = self._open_queue(sub, session.persistent)
            except Exception as exc:
                log.info("MQTT %s: subscription %r not resumed: %s", self.client_id, sub.options.filter, exc)
                continue
            self._attach(sub, queue)

    def on_unsubscribe(self: MqttAdapter, u: Unsubscribe) -> None:
        session = self.mqtt
        reasons = []
        for text in u.filters:
            sub = session.subscriptions.pop(text, None)
            consumer = self.consumers.pop(text, None)
            if consumer is not None:
                self.by_consumer.pop(consumer.id, None)
                self.session.remove_consumer(consumer)
            if sub is None:
                reasons.append(R.NO_SUBSCRIPTION_EXISTED)
                continue
            for key, pid in [(k, p) for k, p in session.packet_ids.items() if k[0] == sub.queue]:
                del session.packet_ids[key]
                self.state.sent_done(self.client_id, pid)
            self.state.drop_queue(sub)
            reasons.append(R.SUCCESS)
        self.state.save(session)
        self.confirm(Unsuback(u.packet_id, tuple(reasons) if self.v5 else ()), durable=session.persistent)

    def release_subscriptions(self: MqttAdapter) -> None:
        self.consumers.clear()
        self.by_consumer.clear()
        self.inflight.clear()

    # -- deliveries ----------------------------------------------------------------------------

    def _deliver(self: MqttAdapter, consumer: Consumer, ref: MessageReference) -> None:
        """The consumer's sink. It runs inside whoever made the message available (another
        client's PUBLISH, a STOMP SEND): nothing may escape it. A message MQTT cannot carry (a
        string over 65,535 bytes) is dropped, as one over the client's maximum packet size is;
        anything else closes this connection (its messages go back), never the sender's."""
        try:
            self._deliver_one(consumer, ref)
        except (MqttLocalError, ValueError, UnicodeError) as exc:
            log.warning("MQTT %s: message %s cannot be sent over MQTT (%s); dropped", self.client_id,
                        ref.message.id, exc)
            self.inflight = {pid: e for pid, e in self.inflight.items() if e[1] is not ref}
            consumer.queue.acknowledge(ref, consumer=consumer)
        except Exception:
            log.exception("MQTT %s: a delivery failed; closing the connection", self.client_id)
            for c in self.consumers.values():
                c.paused = True
            self.conn.call_later(0, lambda: self.fail(R.IMPLEMENTATION_SPECIFIC_ERROR, "a delivery failed"))

    def _deliver_one(self: MqttAdapter, consumer: Consumer, ref: MessageReference) -> None:
        sub = self.by_consumer.get(consumer.id)
        queue = consumer.queue
        if sub is None or self.mqtt is None:
            return
        message = ref.message
        if sub.options.no_local and message.properties.get("_MQTT_CLIENT") == self.client_id:
            queue.acknowledge(ref, consumer=consumer)
            return
        qos = min(sub.options.qos, message_qos(message))
        retained = RETAINED_TOPIC in message.properties
        retain = retained or (sub.options.retain_as_published and bool(message.properties.get("_MQTT_RETAIN")))
        pid = None
        known = False  # sent before with this packet id (before a reconnect or a restart)
        if qos:
            got = self._packet_id(ref)
            if got is None:  # cannot happen under the receive maximum; the message goes back
                queue.cancel(ref, redelivered=False, consumer=consumer)
                return
            pid, known = got
        if message.large is not None:
            message = _with_body(message, self.broker.large.read(message.large))  # whole, in memory
        topic = self._topics.get(message.address)
        if topic is None:
            if len(self._topics) >= 1024:
                self._topics.clear()
            name = address_to_topic(message.address)
            topic = self._topics[message.address] = (name, encode_str(name))
        dup = known or ref.delivery_count > 0
        if message.expiration or sub.identifier or (self.v5 and static_properties(message)):
            publish = to_publish(message, qos, pid, retain=retain, dup=dup, v5=self.v5, topic=topic[0],
                                 subscription_ids=[sub.identifier] if sub.identifier else None)
            if publish is None:  # expired on its way
                queue.acknowledge(ref, consumer=consumer)
                return
            head, payload = self.codec.publish_parts(publish)
        else:  # no properties to send (3.1.1, most 5.0 deliveries): the header from the encoded topic
            payload = message.body
            size = len(payload)
            if qos:
                head = self.codec.publish_head(topic[1], size, qos, pid, retain=retain, dup=dup)
            elif (last := self._head0)[0] is topic and last[1] == size and last[2] is retain:
                head = last[3]  # the same as the last QoS 0 delivery's (a topic's run of messages)
            else:
                head = self.codec.publish_head(topic[1], size, 0, None, retain=retain, dup=False)
                self._head0 = (topic, size, retain, head)
        if self.client_max_packet is not None and len(head) + len(payload) > self.client_max_packet:
            log.info("MQTT %s: a message of %d bytes over the client's maximum packet size is dropped",
                     self.client_id, len(head) + len(payload))
            queue.acknowledge(ref, consumer=consumer)
            return
        chunks = (head + payload,) if len(payload) < 4096 else (head, payload)
        if not qos:
            if self._held:
                self._write_out(chunks, False)
            else:
                for chunk in chunks:
                    self.conn.write(chunk)
            # done as written; the queue's dispatch that called this sink goes on by itself
            # (a sink runs only inside `Queue.deliver`), so the acknowledgement starts no other
            queue.acknowledge(ref, 0, consumer, deliver=False)
            return
        session = self.mqtt
        recorded = not known and session.persistent and ref.message.durable and queue.durable
        if recorded:  # its packet id outlives a restart; QoS 2 goes out once that is durable
            self.state.sent(self.client_id, pid, queue.name, ref.message.id)
        self._write_out(chunks, recorded and qos == 2)
        self.inflight[pid] = (consumer, ref)
        session.packet_ids[(queue.name, ref.message.id)] = pid
        if len(self.inflight) + len(self.mqtt.pubrel_pending) >= self.receive_max:
            self._window_full = True
            for c in self.consumers.values():
                c.paused = True

    def _packet_id(self: MqttAdapter, ref: MessageReference) -> tuple[int, bool] | None:
        """A packet id for the delivery of `ref`, and whether it is the one it was sent with
        before (a redelivery after a reconnect or a restart keeps it, when it still can)."""
        session = self.mqtt
        busy = self.inflight
        pending = session.pubrel_pending
        reserved = session.reserved
        pid = session.packet_ids.get((ref.queue.name, ref.message.id))
        if pid is not None and pid not in busy and pid not in pending:
            reserved.discard(pid)
            return pid, True
        for _ in range(65535):
            pid = self._next_pid
            self._next_pid = pid % 65535 + 1
            if pid not in busy and pid not in pending and pid not in reserved:
                return pid, False
        return None

    def _write_out(self: MqttAdapter, chunks: tuple[bytes, ...], synced: bool) -> None:
        """Write a delivery, after the store's next sync when `synced`, in delivery order.
        Deliveries needing a sync during one turn of the loop share one."""
        held = self._held
        if not held and not synced:
            for chunk in chunks:
                self.conn.write(chunk)
            return
        if synced and not (held and not held[-1][2]):  # a new batch: its sync is asked soon
            held.append([[], False, False])
            self.conn.call_later(0, self._sync_held)
        elif not held:
            held.append([[], True, True])
        held[-1][0].extend(chunks)

    def _sync_held(self: MqttAdapter) -> None:
        batch = next((b for b in self._held if not b[2]), None)
        if batch is None:
            return
        batch[2] = True

        def durable() -> None:
            batch[1] = True
            held = self._held
            while held and held[0][1]:
                if self.conn.closed:
                    held.clear()
                    return
                for chunk in held.popleft()[0]:
                    self.conn.write(chunk)

        def failed(exc: BaseException) -> None:
            self._held.clear()
            if not self.conn.closed:
                self.fail(R.UNSPECIFIED_ERROR, f"not persisted: {exc}")

        self.broker.store.sync(durable, failed=failed)

    def on_delivery_ack(self: MqttAdapter, packet) -> None:
        """PUBACK (QoS 1 done), PUBREC (QoS 2: the message is the client's; PUBREL follows),
        PUBCOMP (QoS 2 done)."""
        pid = packet.packet_id
        session = self.mqtt
        ptype = packet.type
        if ptype == PUBCOMP:
            if pid in session.pubrel_pending:
                session.pubrel_pending.discard(pid)
                if session.persistent:
                    self.state.released_done(self.client_id, pid)
        else:
            entry = self.inflight.pop(pid, None)
            if entry is None:
                if ptype == PUBREC and self.v5:
                    self.write(Pubrel(pid, R.PACKET_IDENTIFIER_NOT_FOUND))
                return
            consumer, ref = entry
            session.packet_ids.pop((ref.queue.name, ref.message.id), None)
            if ptype == PUBREC and packet.reason < 0x80:
                session.pubrel_pending.add(pid)
                if session.persistent and ref.message.durable and ref.queue.durable:
                    self.state.released(self.client_id, pid, ref)  # PUBREL again after a restart
                else:
                    self.session.acknowledge(consumer, [ref])
                self.session.confirm(self.codec.ack(T.PUBREL, pid), durable=True)
            else:  # PUBACK, or a PUBREC refusing the message: not sent again either
                if session.persistent:  # the record first: never one left for an acknowledged message
                    self.state.sent_done(self.client_id, pid)
                consumer.queue.acknowledge(ref, 0, consumer)  # (`ServerSession.acknowledge` of one)
        if self._window_full and len(self.inflight) + len(session.pubrel_pending) < self.receive_max:
            self._window_full = False
            self._resume_due = True  # once the read's packets are handled (`resume_deliveries`)

    def resume_deliveries(self: MqttAdapter) -> None:
        """The window opened during a read (PUBACK, PUBREC, PUBCOMP): deliver again, once for all
        of that read's acknowledgements rather than one message after each."""
        self._resume_due = False
        if not self._window_full and not self.conn.writing_paused and not self.conn.closed:
            self.session.resume()

    # -- the connection's write flow -------------------------------------------------------

    def pause(self: MqttAdapter) -> None:
        self.session.pause()

    def resume(self: MqttAdapter) -> None:
        if not self._window_full:
            self.session.resume()


def _with_body(message, body: bytes):
    from petrel.core.message import Message

    return Message(id=message.id, address=message.address, body=body, properties=message.properties,
                   durable=message.durable, priority=message.priority, expiration=message.expiration,
                   timestamp=message.timestamp)
