"""OpenWire (ActiveMQ Classic's JMS client) on the post office, through the server session.

The WireFormatInfo exchange (tight or loose encoding, versions 10-12: `petrel.codec.openwire`); ConnectionInfo (login
when security is on), SessionInfo; producers, sends and their flow control (`openwire_producers`;
messages: `openwire_messages`; destination names: `openwire_destinations`); consumers,
dispatch and acks (`openwire_consumers`; browsers: `openwire_browsers`); transactions, local and
XA with two-phase commit and recovery (`openwire_transactions`); temporary queues and topics (DestinationInfo), living as
long as their connection; RemoveSubscriptionInfo; RemoveInfo, ShutdownInfo, KeepAliveInfo both
ways with the negotiated inactivity duration. A command that asks for a response gets its
Response in read order, a persistent message's only once it is durable (the session's
confirmations); refusals are ExceptionResponses. A fault-tolerant (failover) client's messages
carry their message id as the duplicate id, so its resends after a reconnect are not
duplicated. A clustered broker's members go to failover clients (`openwire_cluster`). Not yet:
compressed bodies.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from petrel.codec.openwire import (
    NEED_DATA,
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
)
from petrel.codec.openwire.commands import JavaThrowable
from petrel.server.access import Access
from petrel.server.adapters.openwire_browsers import OpenWireBrowsers
from petrel.server.adapters.openwire_cluster import OpenWireCluster
from petrel.server.adapters.openwire_consumers import OpenWireConsumers
from petrel.server.adapters.openwire_producers import OpenWireProducers
from petrel.server.adapters.openwire_transactions import OpenWireTransactions
from petrel.server.login import OffLoopLogin
from petrel.server.refusals import NotDurable, Refused
from petrel.server.session import ServerSession

if TYPE_CHECKING:
    from petrel.server.broker import Broker
    from petrel.server.connection import Connection

log = logging.getLogger("petrel.server.openwire")

JMS_EXCEPTION = "javax.jms.JMSException"
SECURITY_EXCEPTION = "javax.jms.JMSSecurityException"
#: Commands a client may send that need no action here (answered when a response is asked for).
IGNORED = (ConnectionControl, ConsumerControl, FlushCommand, ControlCommand)


class OpenWireAdapter(OpenWireProducers, OpenWireConsumers, OpenWireBrowsers, OpenWireCluster, OpenWireTransactions):
    protocol = "openwire"

    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        self.codec = OpenWireConnection(max_frame_size=broker.config.max_frame_size)
        self.access = Access(broker.security)
        self.session = ServerSession(broker, conn, self.access, run=self._run, on_sync_failed=self._not_durable)
        self.connection_id: str | None = None
        self.client_id: str | None = None
        self.temporary: set[Destination] = set()  # temporary destinations this connection made
        self.tx_acks: dict[str, list] = {}  # transaction -> [(consumer, refs)] its acks settle at the commit
        self.fault_tolerant = False  # a failover client: its message id is its messages' duplicate id
        self._closing = False
        self._last_read = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._login_task = None
        self.node = f"ID:petrel-{getattr(broker.config, 'name', None) or 'broker'}"
        self.init_producers()
        self.init_consumers()
        self.init_browsers()

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
            if self.move_planned is not None:
                self.try_move()
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
                self.on_producer(c)
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
            elif t is MessagePull:
                self.on_pull(c)
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
        self.write(self.broker_info())
        self.respond(c)
        self.send_cluster(new=not c.failover_reconnect)  # a failover client learns the cluster's other members

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
            self.remove_consumer(obj, r.last_delivered_sequence_id)
        elif isinstance(obj, ProducerId):
            self.remove_producer(obj)
        elif isinstance(obj, SessionId):
            for cid in [cid for cid in (*self.subs, *self.browsers) if cid.connection_id == obj.connection_id
                        and cid.session_id == obj.value]:
                self.remove_consumer(cid, r.last_delivered_sequence_id)
        elif isinstance(obj, ConnectionId):
            for cid in [*self.subs, *self.browsers]:
                self.remove_consumer(cid, r.last_delivered_sequence_id)
        self.respond(r)

    def pause(self) -> None:
        self.session.pause()

    def resume(self) -> None:
        self.session.resume()
        self.resume_browsers()

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
        for sub in self.subs.values():
            if sub.timer is not None:
                sub.timer.cancel()
        self.subs.clear()
        self.by_consumer.clear()
        self.stop_following()
        self.browsers.clear()
        self.session.release()
        temporary, self.temporary = self.temporary, set()
        for dest in temporary:  # they live as long as their connection
            self._delete_temporary(dest)
