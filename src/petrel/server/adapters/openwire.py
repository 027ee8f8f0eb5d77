"""OpenWire (ActiveMQ Classic's JMS client) on the post office, through the server session.

First light of issue 15. The WireFormatInfo exchange (loose encoding: `petrel.codec.openwire`);
ConnectionInfo (login when security is on), SessionInfo, ProducerInfo; ConsumerInfo on queues
and topics (the prefetch is the consumer's window, selectors, durable topic subscribers by
client id + subscription name, RemoveSubscriptionInfo deletes one); messages of every kind
(text converted, the others' bodies kept as the client encoded them, `_OW_KIND`; Java property
types a plain number loses in `_OW_TYPES`); MessageAck (standard and individual acks settle,
poison acks send back, delivered acks widen the window by what the client holds, as ActiveMQ
does); local transactions (TransactionInfo begin, commit one phase, rollback: acks settle at
the commit, a rollback leaves the messages with the client, which redelivers them itself);
temporary queues and topics (DestinationInfo), living as long as their connection; RemoveInfo,
ShutdownInfo, KeepAliveInfo both ways with the negotiated inactivity duration. A command that
asks for a response gets its Response in read order, a persistent message's only once it is
durable (the session's confirmations); refusals are ExceptionResponses. A fault-tolerant
(failover) client's messages carry their message id as the duplicate id, so its resends after
a reconnect are not duplicated. Advisory consumers (``ActiveMQ.Advisory.*``) are accepted and
never fed. Not yet: queue browsers (refused), XA, MessagePull (a prefetch 0 consumer gets a window of one, pushed), ProducerAck flow control, compressed bodies,
the cluster's members in ConnectionControl/BrokerInfo, tight encoding.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from petrel.codec.openwire import (
    NEED_DATA,
    AckType,
    BrokerId,
    BrokerInfo,
    ConnectionControl,
    ConnectionError as OwConnectionError,
    ConnectionId,
    ConnectionInfo,
    ConsumerControl,
    ConsumerId,
    ConsumerInfo,
    ControlCommand,
    DataType,
    Destination,
    DestinationInfo,
    ExceptionResponse,
    FlushCommand,
    KeepAliveInfo,
    Message as OwMessage,
    MessageAck,
    MessageDispatch,
    MessageId,
    MessagePull,
    OpenWireConnection,
    OpenWireProtocolError,
    ProducerId,
    ProducerInfo,
    RemoveInfo,
    RemoveSubscriptionInfo,
    Response,
    SessionId,
    SessionInfo,
    ShutdownInfo,
    TransactionInfo,
    WireFormatInfo,
    text_content,
    text_of,
)
from petrel.codec.openwire.commands import JavaThrowable, LocalTransactionId
from petrel.codec.openwire.marshal import JavaByte, JavaFloat, JavaLong, JavaShort
from petrel.core.consumer import Consumer
from petrel.core.message import DUPLICATE_ID, Message, RoutingType
from petrel.server.access import Access
from petrel.server.login import OffLoopLogin
from petrel.server.refusals import NotDurable, Refused
from petrel.server.session import ServerSession

if TYPE_CHECKING:
    from petrel.core.queue import MessageReference
    from petrel.server.broker import Broker
    from petrel.server.connection import Connection

log = logging.getLogger("petrel.server.openwire")

KIND = "_OW_KIND"  # the JMS message kind (text, bytes...), for OpenWire consumers
TYPES = "_OW_TYPES"  # the Java types of properties a plain int or float would lose: "l:name,s:name..."
REPLY_KIND = "_OW_REPLY_KIND"  # the JMSReplyTo's kind (queue, topic, temporary queue or topic)
ADVISORY_PREFIX = "ActiveMQ.Advisory."
JMS_EXCEPTION = "javax.jms.JMSException"
SECURITY_EXCEPTION = "javax.jms.JMSSecurityException"
TEXT_KINDS = (DataType.ACTIVEMQ_TEXT_MESSAGE,)
#: Commands a client may send that need no action here (answered when a response is asked for).
#: A MessagePull (prefetch 0) among them: such a consumer gets a window of one, pushed.
IGNORED = (ConnectionControl, ConsumerControl, FlushCommand, ControlCommand, MessagePull)


_CODES = {JavaLong: "l", JavaShort: "s", JavaByte: "b", JavaFloat: "f"}
_JAVA = {code: cls for cls, code in _CODES.items()}


def _plain(properties: dict[str, Any]) -> dict[str, Any]:
    """Properties as Petrel keeps them (plain ints and floats; a map or list value as text), the
    Java types a plain number would lose noted under `TYPES`."""
    out: dict[str, Any] = {}
    types = []
    for name, value in properties.items():
        cls = type(value)
        code = _CODES.get(cls)
        if code is not None:
            types.append(f"{code}:{name}")
            value = float(value) if cls is JavaFloat else int(value)
        elif cls is dict or cls is list:
            value = str(value)
        out[name] = value
    if types:
        out[TYPES] = ",".join(types)
    return out


class _Sub:
    __slots__ = ("info", "consumer", "by_message", "order", "dispatched", "prefetch", "extension")

    def __init__(self, info: ConsumerInfo, consumer: Consumer | None) -> None:
        self.info = info
        self.consumer = consumer
        self.prefetch = consumer.window if consumer is not None else 0
        self.extension = 0  # messages delivered-acked (held by a client-ack session): the window grows by them
        self.by_message: dict[int, int] = {}  # Petrel message id -> its reference's seq (acks name messages)
        self.order: dict[int, int] = {}  # seq -> dispatch number: a standard ack covers all dispatched up to its last
        self.dispatched = 0


class OpenWireAdapter:
    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        self.codec = OpenWireConnection(max_frame_size=broker.config.max_frame_size)
        self.access = Access(broker.security)
        self.session = ServerSession(broker, conn, self.access, run=self._run, on_sync_failed=self._not_durable)
        self.connection_id: str | None = None
        self.client_id: str | None = None
        self.subs: dict[ConsumerId, _Sub] = {}
        self.temporary: set[Destination] = set()  # temporary destinations this connection made
        self.tx_acks: dict[str, list] = {}
        self.fault_tolerant = False  # transaction -> [(consumer, refs)] its acks settle at the commit
        self.by_consumer: dict[int, _Sub] = {}
        self._closing = False
        self._last_read = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._login_task = None
        self._node = f"ID:petrel-{getattr(broker.config, 'name', None) or 'broker'}"

    # -- input -------------------------------------------------------------------------------

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
                command = self.codec.next_event()
                if command is NEED_DATA:
                    break
                self.handle(command)
        except OpenWireProtocolError as exc:
            self.fail(f"protocol error: {exc.message}")
        except Exception as exc:  # never let one client take the broker down
            log.exception("internal error handling an OpenWire command from %s", self.conn.peer)
            self.fail(f"internal error: {exc}")
        finally:
            office.creator = creator
            self.session.flush()

    def handle(self, c: Any) -> None:
        t = type(c)
        try:
            if t is OwMessage:
                self.on_message(c)
            elif t is MessageAck:
                self.on_ack(c)
            elif t is WireFormatInfo:
                self.write(self.codec.wire_format_info())
                self._watch_inactivity()
            elif t is ConnectionInfo:
                self.on_connection(c)
            elif t is SessionInfo:
                self.respond(c)
            elif t is ProducerInfo:
                self.respond(c)
            elif t is ConsumerInfo:
                self.on_consumer(c)
            elif t is RemoveInfo:
                self.on_remove(c)
            elif t is TransactionInfo:
                self.on_transaction(c)
            elif t is DestinationInfo:
                self.on_destination(c)
            elif t is RemoveSubscriptionInfo:  # a durable subscriber's unsubscribe
                if not self.session.delete_durable(c.client_id or self.client_id, c.subscription_name or ""):
                    raise Refused(f"no durable subscription {c.subscription_name!r} for client id {c.client_id!r}")
                self.respond(c, durable=True)
            elif t is KeepAliveInfo:
                if c.response_required:
                    self.session.confirm(self.codec.send(KeepAliveInfo()))
            elif t is ShutdownInfo:
                self._closing = True
                self.session.confirm(self.close)
            elif t in IGNORED:  # what a client says of itself (a failover client's resume...)
                self.respond(c)
            else:
                raise Refused(f"{t.__name__} is not supported by Petrel's OpenWire yet")
        except Refused as exc:
            self.refuse(c, exc)

    def write(self, command: Any) -> None:
        self.conn.write(self.codec.send(command))

    def respond(self, c: Any, *, durable: bool = False) -> None:
        if c.response_required:
            self.session.confirm(self.codec.send(Response(correlation_id=c.command_id)), durable=durable)
        elif durable:
            self.session.need_sync()

    def refuse(self, c: Any, exc: Refused) -> None:
        log.info("OpenWire %s from %s refused: %s", type(c).__name__, self.client_id or self.conn.peer, exc)
        cls = SECURITY_EXCEPTION if exc.kind == "not-authorized" else JMS_EXCEPTION
        if getattr(c, "response_required", False):
            self.session.confirm(self.codec.send(ExceptionResponse(correlation_id=c.command_id,
                                                                   exception=JavaThrowable(cls, str(exc)))))
        else:  # nobody waits for an answer: the connection says so and ends
            self.fail(str(exc), cls)

    # -- connection ------------------------------------------------------------------------

    def on_connection(self, c: ConnectionInfo) -> None:
        if self.access.enabled and self.access.subject is None:
            self._log_in(c)
            return
        self.connection_id = c.connection_id.value if c.connection_id else None
        self.client_id = c.client_id
        self.fault_tolerant = c.fault_tolerant  # a failover client: its resends must not duplicate
        self.write(BrokerInfo(broker_id=BrokerId(self._node), broker_name="petrel"))
        self.respond(c)

    def _log_in(self, c: ConnectionInfo) -> None:
        self._login_task = OffLoopLogin(
            self.session, self.access, self.broker, self.conn, c.user_name, c.password,
            on_success=lambda: self.on_connection(c),
            on_refused=lambda why: self._refuse_login(c, why),
            log=log)

    def _refuse_login(self, c: ConnectionInfo, why: str) -> None:
        self.write(ExceptionResponse(correlation_id=c.command_id, exception=JavaThrowable(SECURITY_EXCEPTION, why)))
        self.session.confirm(self.close)

    def _watch_inactivity(self) -> None:
        ms = self.codec.inactivity_ms
        if not ms:
            return
        period = ms / 1000 / 3

        def tick() -> None:
            if self.conn.closed or self._closing:
                return
            silent = time.monotonic() - self._last_read
            if silent > ms / 1000 and not self.session.held and not self.session.blocked:
                self.fail(f"no command for {silent:.1f}s (max inactivity {ms} ms)")
                return
            try:
                self.write(KeepAliveInfo())
            except Exception:
                return
            self._timer = self.conn.call_later(period, tick)

        self._timer = self.conn.call_later(period, tick)

    # -- producers ---------------------------------------------------------------------------

    def on_message(self, m: OwMessage) -> None:
        dest = m.destination
        if dest is None or not dest.name:
            raise Refused("a message without a destination")
        message = self.to_message(m)
        routing = RoutingType.MULTICAST if dest.is_topic else RoutingType.ANYCAST
        tx = self.tx_name(m.transaction_id)
        self.session.send(message, routing, tx)
        self.respond(m, durable=m.persistent and tx is None)

    def to_message(self, m: OwMessage) -> Message:
        props = _plain(m.properties) if m.properties else {}
        body = m.content or b""
        if m.compressed:
            raise Refused("compressed messages are not supported yet (useCompression)")
        if m.kind in TEXT_KINDS:
            text = text_of(m.content)
            body = b"" if text is None else text.encode("utf-8", "surrogatepass")
        props[KIND] = int(m.kind)
        if self.fault_tolerant and m.message_id is not None and DUPLICATE_ID not in props:
            # the failover transport resends what it has no response for: the same message id
            props[DUPLICATE_ID] = str(m.message_id)
        if m.correlation_id is not None:
            props["correlation-id"] = m.correlation_id
        if m.type is not None:
            props["JMSType"] = m.type
        if m.group_id is not None:
            props["JMSXGroupID"] = m.group_id
            props["JMSXGroupSeq"] = m.group_sequence
        if m.reply_to is not None and m.reply_to.name:
            props["reply-to"] = m.reply_to.name
            if m.reply_to.kind != DataType.ACTIVEMQ_QUEUE:
                props[REPLY_KIND] = int(m.reply_to.kind)
        return Message(id=self.broker.store.next_id(), address=m.destination.name, body=body, properties=props,
                       durable=m.persistent, priority=max(0, min(9, m.priority)), expiration=max(0, m.expiration),
                       timestamp=m.timestamp, user_id=self.access.user)

    # -- consumers ---------------------------------------------------------------------------

    def on_consumer(self, c: ConsumerInfo) -> None:
        dest = c.destination
        if dest is None or not dest.name:
            raise Refused("a consumer without a destination")
        if c.consumer_id in self.subs:
            raise Refused(f"consumer {c.consumer_id} exists already")
        if dest.name.startswith(ADVISORY_PREFIX):  # no advisories: the consumer waits for nothing
            self.subs[c.consumer_id] = _Sub(c, None)
            self.respond(c)
            return
        if c.browser:  # (a consumer would take what a browser only looks at)
            raise Refused("queue browsers are not supported by Petrel's OpenWire yet")
        routing = RoutingType.MULTICAST if dest.is_topic else RoutingType.ANYCAST
        durable_name = c.subscription_name if dest.is_topic else None
        queue, selector = self.session.open_queue(dest.name, routing, selector=c.selector,
                                                  client_id=c.client_id or self.client_id, durable_name=durable_name)
        window = c.prefetch_size if c.prefetch_size > 0 else 1
        consumer = Consumer(queue, self._deliver, selector=selector, window=window)
        self.session.add_consumer(consumer)
        sub = _Sub(c, consumer)
        self.subs[c.consumer_id] = sub
        self.by_consumer[consumer.id] = sub
        self.respond(c)
        queue.add_consumer(consumer)

    def _deliver(self, consumer: Consumer, ref: MessageReference) -> None:
        sub = self.by_consumer.get(consumer.id)
        if sub is None:
            return
        m = ref.message
        sub.by_message[m.id] = ref.seq
        sub.dispatched += 1
        sub.order[ref.seq] = sub.dispatched
        info = sub.info
        self.conn.write(self.codec.send(MessageDispatch(consumer_id=info.consumer_id, destination=info.destination,
                                                        message=self.to_openwire(m, info.destination),
                                                        redelivery_counter=ref.delivery_count)))

    def to_openwire(self, m: Message, dest: Destination) -> OwMessage:
        props = {k: v for k, v in m.properties.items() if not k.startswith("_")}
        types = m.properties.get(TYPES)
        if types:
            for item in str(types).split(","):
                code, _, name = item.partition(":")
                if name in props and code in _JAVA:
                    try:
                        props[name] = _JAVA[code](props[name])
                    except (TypeError, ValueError):
                        pass
        kind = m.properties.get(KIND, DataType.ACTIVEMQ_BYTES_MESSAGE)
        content: bytes | None = m.body
        if kind in TEXT_KINDS:
            try:
                content = text_content(m.body.decode("utf-8", "surrogatepass"))
            except UnicodeDecodeError:  # not text after all: the bytes as they are
                kind = DataType.ACTIVEMQ_BYTES_MESSAGE
        correlation = props.pop("correlation-id", None)
        jms_type = props.pop("JMSType", None)
        group = props.pop("JMSXGroupID", None)
        group_seq = props.pop("JMSXGroupSeq", 0)
        reply_to = props.pop("reply-to", None)
        producer = ProducerId(self._node, 0, 0)
        return OwMessage(
            kind=kind, producer_id=producer, destination=Destination(dest.kind, m.address),
            message_id=MessageId(producer_id=producer, producer_sequence_id=m.id, broker_sequence_id=m.id),
            persistent=m.durable, priority=m.priority, expiration=m.expiration, timestamp=m.timestamp,
            content=content, properties=props or None,
            correlation_id=None if correlation is None else str(correlation),
            type=None if jms_type is None else str(jms_type),
            group_id=None if group is None else str(group), group_sequence=int(group_seq or 0),
            reply_to=None if reply_to is None else Destination(
                int(m.properties.get(REPLY_KIND, DataType.ACTIVEMQ_QUEUE)), str(reply_to)),
            user_id=m.user_id, broker_in_time=m.timestamp, broker_out_time=int(time.time() * 1000))

    def on_ack(self, a: MessageAck) -> None:
        sub = self.subs.get(a.consumer_id)
        if sub is None or sub.consumer is None:
            self.respond(a)
            return
        consumer = sub.consumer
        kind = a.ack_type
        if kind == AckType.DELIVERED:  # the client holds them unacknowledged: room for as many more
            sub.extension += max(0, a.message_count)
            consumer.window = sub.prefetch + sub.extension
            consumer.queue.deliver()
            self.respond(a)
            return
        if kind in (AckType.REDELIVERED, AckType.UNMATCHED) or a.last_message_id is None:
            self.respond(a)
            return
        seq = sub.by_message.get(a.last_message_id.producer_sequence_id)
        if seq is None or seq not in consumer.delivering:
            self.respond(a)  # settled already (a repeated ack)
            return
        delivering = consumer.delivering
        if kind == AckType.INDIVIDUAL:
            refs = [delivering[seq]]
        else:  # everything dispatched up to the last one (a rolled-back transaction's acks come back unordered)
            order = sub.order
            limit = order.get(seq, 0)
            refs = [ref for s, ref in delivering.items() if order.get(s, 0) <= limit]
        if a.transaction_id is None:
            for ref in refs:
                sub.by_message.pop(ref.message.id, None)
                sub.order.pop(ref.seq, None)
        elif len(sub.order) > 2 * len(delivering) + 1024:  # forget what transactions settled
            sub.order = {s: n for s, n in sub.order.items() if s in delivering}
            sub.by_message = {i: s for i, s in sub.by_message.items() if s in delivering}
        if sub.extension:
            sub.extension = max(0, sub.extension - len(refs))
            consumer.window = sub.prefetch + sub.extension
        tx = self.tx_name(a.transaction_id)
        if kind == AckType.POISON:
            self.session.cancel(consumer, refs)
        elif tx is not None:
            # settled at the commit; a rollback leaves them with the client, which redelivers them itself
            self.session.transaction(tx)
            self.tx_acks.setdefault(tx, []).append((consumer, refs))
        else:
            self.session.acknowledge(consumer, refs)
        self.respond(a, durable=a.response_required and tx is None)

    # -- transactions ------------------------------------------------------------------------

    @staticmethod
    def tx_name(tid: Any) -> str | None:
        """The server session's name of a local transaction; XA is refused."""
        if tid is None:
            return None
        if isinstance(tid, LocalTransactionId):
            conn = tid.connection_id.value if tid.connection_id is not None else ""
            return f"{conn}:{tid.value}"
        raise Refused("XA transactions are not supported by Petrel's OpenWire yet")

    def on_transaction(self, c: TransactionInfo) -> None:
        name = self.tx_name(c.transaction_id)
        if name is None:
            raise Refused("a TransactionInfo without a transaction id")
        kind = c.type
        if kind == 0:  # BEGIN
            self.session.begin(name)
            self.respond(c)
        elif kind == 2:  # COMMIT_ONE_PHASE
            seen: set[tuple[int, int]] = set()
            for consumer, refs in self.tx_acks.pop(name, ()):
                live = []
                for ref in refs:  # still held by the consumer, once each
                    key = (consumer.id, ref.seq)
                    if key not in seen and consumer.delivering.get(ref.seq) is ref:
                        seen.add(key)
                        live.append(ref)
                if live:
                    self.session.acknowledge(consumer, live, name)
            self.session.commit(name)
            if c.response_required:
                self.session.confirm(self.codec.send(Response(correlation_id=c.command_id)), durable=True,
                                     transactional=True)
            else:
                self.session.need_sync(transactional=True)
        elif kind == 4:  # ROLLBACK
            self.tx_acks.pop(name, None)
            if name in self.session.transactions:
                self.session.rollback(name)
            self.respond(c)
        elif kind in (7, 6):  # END, FORGET: nothing to do for a local transaction
            self.respond(c)
        else:
            raise Refused(f"transaction operation {kind} is not supported by Petrel's OpenWire yet (XA)")

    # -- temporary destinations ---------------------------------------------------------------

    def on_destination(self, c: DestinationInfo) -> None:
        """A temporary queue or topic made (nothing to do: addresses are made as they are used)
        or deleted (its queue goes, and with it what it held); the others' are answered alone."""
        dest = c.destination
        if dest is not None and dest.is_temporary and dest.name:
            if c.operation_type == 0:
                self.temporary.add(dest)
            else:
                self.temporary.discard(dest)
                self._delete_temporary(dest)
        self.respond(c)

    def _delete_temporary(self, dest: Destination) -> None:
        if dest.kind == DataType.ACTIVEMQ_TEMP_QUEUE and dest.name in self.office.queues:
            try:
                self.office.delete_queue(dest.name)
            except Exception as exc:  # (in use by another connection's consumer, say)
                log.info("OpenWire temporary queue %s not deleted: %s", dest.name, exc)

    def on_remove(self, r: RemoveInfo) -> None:
        obj = r.object_id
        if isinstance(obj, ConsumerId):
            sub = self.subs.pop(obj, None)
            if sub is not None and sub.consumer is not None:
                self.by_consumer.pop(sub.consumer.id, None)
                self.session.remove_consumer(sub.consumer)
        elif isinstance(obj, SessionId):
            for cid in [cid for cid in self.subs if cid.connection_id == obj.connection_id
                        and cid.session_id == obj.value]:
                self.on_remove(RemoveInfo(object_id=cid))
        elif isinstance(obj, ConnectionId):
            for cid in list(self.subs):
                self.on_remove(RemoveInfo(object_id=cid))
        self.respond(r)

    def pause(self) -> None:
        self.session.pause()

    def resume(self) -> None:
        self.session.resume()

    # -- the end -----------------------------------------------------------------------------

    def fail(self, why: str, cls: str = JMS_EXCEPTION) -> None:
        log.info("OpenWire error for %s: %s", self.client_id or self.conn.peer, why)
        if not self.conn.closed and self.codec.version is not None:
            try:
                self.write(OwConnectionError(exception=JavaThrowable(cls, why)))
            except Exception:
                pass
        self.close()

    def error(self, message: str) -> None:
        """A broker limit closes this connection (`petrel.server.limits.refuse`)."""
        self.fail(message)

    def _not_durable(self, error: NotDurable) -> None:
        self.fail(str(error))

    def close(self) -> None:
        self._closing = True
        self.conn.close()

    def connection_lost(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        if self._login_task is not None:
            self._login_task.cancel()
        self.subs.clear()
        self.by_consumer.clear()
        self.session.release()
        temporary, self.temporary = self.temporary, set()
        for dest in temporary:  # they live as long as their connection
            self._delete_temporary(dest)
