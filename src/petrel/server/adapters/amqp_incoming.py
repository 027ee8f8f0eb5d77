"""AMQP 1.0 transfers from the client into the broker, and the transaction coordinator (a mixin
of `AmqpAdapter`).

Each transfer on a link where the client sends becomes a Petrel message routed through the
session (to the link's target, or to the message's ``to`` on the anonymous relay). An unsettled
transfer is answered with an accepted disposition once the message is durable (one sync per
read), or a rejected one naming the refusal's condition. A body over min_large_message_size
goes to its own file first. Credit is topped up when half is used. The coordinator link takes
declare and discharge messages: transactions are the session's, named by their txn-id.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from petrel.codec.amqp.errors import (
    ERRANT_LINK, INTERNAL_ERROR, NOT_FOUND, NOT_IMPLEMENTED, TX_ROLLBACK, TX_UNKNOWN_ID, UNATTACHED_HANDLE,
    AmqpError,
)
from petrel.codec.amqp.message import decode_message
from petrel.codec.amqp.performatives import (
    ROLE_RECEIVER, Accepted, Declare, Declared, Discharge, Disposition, Error, Rejected, TransactionalState,
)
from petrel.core.message import Message, RoutingType
from petrel.server.adapters.amqp_convert import parse_address, to_petrel
from petrel.server.adapters.amqp_links import CREDIT, Channel, Link, _condition
from petrel.server.refusals import Refused, TransactionRolledBack, TransactionUnknown

if TYPE_CHECKING:
    from petrel.server.adapters.amqp import AmqpAdapter

__all__ = ["IncomingFrames"]

log = logging.getLogger("petrel.server.amqp")


class IncomingFrames:
    """transfer (from the client), and the coordinator's declare and discharge."""

    # -- transfers from the client --------------------------------------------------------------------

    def on_transfer(self: AmqpAdapter, ch: Channel, event) -> None:
        t = event.performative
        ch.next_incoming_id = (ch.next_incoming_id + event.frames) & 0xFFFFFFFF
        link = ch.links.get(int(t.handle))
        if link is None and int(t.handle) in ch.detached:
            return  # sent before the client saw the broker's detach
        if link is None:
            raise AmqpError(UNATTACHED_HANDLE, f"transfer on handle {t.handle}, which is not attached")
        if link.outgoing:
            raise AmqpError(ERRANT_LINK, f"transfer on handle {t.handle}, where the broker is the sender")
        if t.aborted:
            return
        if link.credit <= 0:
            raise AmqpError("amqp:link:transfer-limit-exceeded", f"transfer on link {link.name!r} without credit")
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) & 0xFFFFFFFF
        if link.coordinator:
            self._coordinate(ch, t, event.payload)
        else:
            self._receive(ch, link, t, event.payload)
        if link.credit <= CREDIT // 2:
            link.credit = CREDIT
            self._grant(link)

    def _receive(self: AmqpAdapter, ch: Channel, link: Link, t, payload: bytes) -> None:
        session = self.session
        tx = None
        txn_id = None
        if isinstance(t.state, TransactionalState):
            txn_id = t.state.txn_id
            tx = self._tx_name(txn_id)
        message = to_petrel(payload, message_id=session.next_id(), address=link.address or "", now=self.now)
        routing_type = link.routing_type
        if link.address is None:  # the anonymous relay: the message says where it goes
            name, routing_type = parse_address(_to_of(payload), None)
            if not name:
                self._reject(ch, t, NOT_FOUND, "a message on the anonymous relay needs properties.to")
                return
            message.address = name
        if routing_type is None:
            routing_type = _jms_dest(message.properties)
        large = self.broker.large
        if large is not None and len(message.body) > self.broker.config.min_large_message_size:
            self._store_large(ch, t, message, routing_type, tx, txn_id)
            return
        self._send(ch, t, message, routing_type, tx, txn_id)

    def _send(self: AmqpAdapter, ch: Channel, t, message, routing_type, tx, txn_id) -> None:
        try:
            self.session.send(message, routing_type, tx,  # (a settled transfer is not answered)
                              then=None if t.settled else lambda result: self._accepted(ch, t, txn_id, message))
        except Refused as exc:
            self._reject(ch, t, _condition(exc), str(exc))

    def _store_large(self: AmqpAdapter, ch: Channel, t, message, routing_type, tx, txn_id) -> None:
        """A body over min_large_message_size goes to its own file (not the journal, not memory);
        a durable one is fsynced off the loop while this connection handles nothing else."""
        large = self.broker.large
        writer = large.create(message.id)
        try:
            writer.write(message.body)
            if not (message.durable and large.sync):
                message.large, message.body = writer.finish(durable=False), b""
                self._send(ch, t, message, routing_type, tx, txn_id)
                return
        except BaseException:
            writer.abort()
            raise
        session = self.session
        session.track_large(writer)
        session.hold()
        future = asyncio.get_running_loop().run_in_executor(None, writer.finish)

        def finished(f: asyncio.Future) -> None:
            session.untrack_large(writer)
            try:
                body = f.result()
            except Exception as exc:
                writer.abort()
                log.error("cannot store a large message body from %s: %s", self.conn.peer, exc)
                session.resume_held(lambda: self._reject(ch, t, INTERNAL_ERROR, f"cannot store the body: {exc}"))
                return
            if self.conn.closed:
                large.delete(body)
                return
            message.large, message.body = body, b""
            session.resume_held(lambda: self._send(ch, t, message, routing_type, tx, txn_id))

        future.add_done_callback(finished)

    def _accepted(self: AmqpAdapter, ch: Channel, t, txn_id: bytes | None, message: Message) -> None:
        if t.settled:
            return
        if txn_id is None:
            self.accept(ch.number, int(t.delivery_id), message.durable, message)
            return
        self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                          state=TransactionalState(txn_id=txn_id, outcome=Accepted())))

    def _reject(self: AmqpAdapter, ch: Channel, t, condition: str, why: str) -> None:
        log.info("AMQP transfer refused for %s: %s", self.conn.peer, why)
        if t.settled:
            return
        self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                          state=Rejected(error=Error(condition=condition, description=why[:1000]))))

    # -- transactions --------------------------------------------------------------------------------

    @staticmethod
    def _tx_name(txn_id: bytes) -> str:
        return "amqp-" + bytes(txn_id).hex()

    def _coordinate(self: AmqpAdapter, ch: Channel, t, payload: bytes) -> None:
        body = decode_message(payload).body
        session = self.session
        if isinstance(body, Declare):
            txn_id = self.new_txn_id()
            session.begin(self._tx_name(txn_id))
            self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                              state=Declared(txn_id=txn_id)))
        elif isinstance(body, Discharge):
            name = self._tx_name(body.txn_id)
            try:
                if body.fail:
                    session.rollback(name)
                    self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                                      state=Accepted()))
                else:
                    session.commit(name)
                    self.reply(ch.number, Disposition(role=ROLE_RECEIVER, first=t.delivery_id, settled=True,
                                                      state=Accepted()), durable=True, transactional=True)
            except TransactionUnknown as exc:
                self._reject(ch, t, TX_UNKNOWN_ID, str(exc))
            except TransactionRolledBack as exc:
                self._reject(ch, t, TX_ROLLBACK, str(exc))
        else:
            self._reject(ch, t, NOT_IMPLEMENTED, "the coordinator takes declare and discharge only")


def _to_of(payload: bytes) -> str | None:
    props = decode_message(payload).properties
    return None if props is None else props.to


def _jms_dest(properties: dict) -> RoutingType | None:
    """Qpid JMS's x-opt-jms-dest annotation: 0 queue, 1 topic, 2 temporary queue, 3 temporary topic."""
    kind = properties.get("_AMQP_MA_x-opt-jms-dest")
    if kind in (0, 2):
        return RoutingType.ANYCAST
    if kind in (1, 3):
        return RoutingType.MULTICAST
    return None
