"""CORE sends and local transactions: SEND and SEND_CHUNK routed through the server session
(`petrel.server.session`), refusals counted as sends (SEND_FAILED with the refusal's code),
producer sessions held back while their address is full (BLOCK), COMMIT and ROLLBACK of a
transacted session. A mixin of `CoreAdapter`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from petrel.cluster.internal_names import INTERNAL_PREFIX, internal_write_problem
from petrel.codec.core import Commit, ErrorCode, Result, Rollback, Send, SendChunk, SendFailed
from petrel.codec.core.cluster import Forward
from petrel.core.message import LargeBody, Message, now_ms
from petrel.core.message_props import INTERNAL_PREFIXES, public
from petrel.server.adapters.core import large
from petrel.server.adapters.core.consuming import ROUTING
from petrel.server.adapters.core.session import SEND_CODES, Fatal, RequestFailed, ServerSession
from petrel.server.adapters.group_wait import wait_for_group
from petrel.server.refusals import Refused, TransactionRolledBack

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["SendFrames"]

log = logging.getLogger("petrel.server.core")


class SendFrames:
    # -- sending -----------------------------------------------------------------------------

    def on_send(self: CoreAdapter, e: Send) -> None:
        session = self.sessions.get(e.session)
        if session is None:
            raise Fatal(ErrorCode.PROTOCOL, f"no session {e.session} on this connection")
        if session.large is not None:
            raise Fatal(ErrorCode.PROTOCOL, "SEND while a large message is still arriving on the session")
        if e.address.startswith(INTERNAL_PREFIX) and (refused := internal_write_problem(self, e.address)) is not None:
            raise Fatal(ErrorCode.UNAUTHORIZED, refused)  # $.petrel.*
        if self.office.grouping is not None and wait_for_group(
                self, e.address, e.properties, ROUTING[e.routing_type + 1] if -1 <= e.routing_type <= 1 else None,
                lambda: self.on_send(e),
                lambda reason: self.refuse(session, ErrorCode.ROUTING, reason)):
            return
        if e.more or len(e.body) > self._large_over:
            large.start(self, session, e)
            return
        self._route(session, e, e.body)

    def on_send_chunk(self: CoreAdapter, e: SendChunk) -> None:
        session = self._session(e.session)
        if session.large is None:
            raise Fatal(ErrorCode.PROTOCOL, "SEND_CHUNK without a SEND that announced more")
        large.chunk(self, session, e.body, e.more)

    def route_large(self: CoreAdapter, session: ServerSession, e: Send | Forward, message_id: int,
                    body: LargeBody) -> None:
        """A SEND (or FORWARD) whose body is already in its file, named for `message_id`."""
        if isinstance(e, Forward):
            self.route_forward(session, e, b"", (message_id, body))
        else:
            self._route(session, e, b"", (message_id, body))

    def refuse(self: CoreAdapter, session: ServerSession, code: ErrorCode, text: str) -> None:
        """A message counted as sent, and refused."""
        session.sent += 1
        if session not in self._dirty:
            self._dirty.append(session)
        self._out.append(self.codec.send(SendFailed(session.id, session.sent, code, text)))

    def _route(self: CoreAdapter, session: ServerSession, e: Send, body: bytes,
               large_body: tuple | None = None) -> None:
        session.sent += 1
        if session.sent - session.confirmed == 1:
            self._dirty.append(session)
        rt = e.routing_type
        if not -1 <= rt <= 1 or not 0 <= e.priority <= 9:
            if large_body is not None:
                self.broker.large.delete(large_body[1])
            self._out.append(self.codec.send(SendFailed(
                session.id, session.sent, ErrorCode.INVALID, "routing_type must be -1..1 and priority 0..9")))
            return
        props = e.properties
        if props:
            for key in props:  # (most sends carry none: no new dict, no subject lookup)
                if key.startswith(INTERNAL_PREFIXES):
                    if not getattr(self.access.subject, "internal", False):
                        props = public(props)  # other protocols' internal properties are not a client's to set
                    break
        # positional: id, address, body, properties, durable, priority, expiration, timestamp, scheduled
        message = Message(large_body[0] if large_body else self._next_id(), e.address, body, props,
                          e.durable, e.priority, e.expiration, e.timestamp or now_ms(), e.scheduled)
        if large_body is not None:  # from here the session owns the file (and drops it if it refuses)
            message.large = large_body[1]
        tx = session.tx
        try:
            # access, internal names and _PETREL_* properties, the office; BLOCK is ours (below)
            result = self.server_session.send(message, ROUTING[rt + 1], tx, block_reads=False)
        except Refused as exc:
            self._out.append(self.codec.send(SendFailed(session.id, session.sent,
                                                        SEND_CODES.get(exc.kind, ErrorCode.ROUTING), str(exc))))
            return
        if e.durable and tx is None:  # the confirmation waits for the disk, or for its consumption
            self._confirmations.need_sync(sent=message)
        if result is not None and (result.blocked or result.throttled):
            self._block(session, message.address, quiet=not result.blocked)

    def _block(self: CoreAdapter, session: ServerSession, address: str, *, quiet: bool = False) -> None:
        """BLOCK policy, a full disk, or consumers far behind (`quiet`): hold the session's
        confirmations until there is room, so its producer stops once its confirmation window is
        full. Other traffic on the connection (acks, credit, pings) keeps flowing, so consumers
        can make the room."""
        if session.blocked:
            return
        session.blocked = True
        if not quiet:
            log.info("producer session %d of %s blocked: address %s is full", session.id, self.conn.peer,
                     address, extra={"event": "address.blocked"})

        def unblock() -> None:
            session.blocked = False
            if not self.conn.closed and not self._closing:
                self.conn.call_later(0, self._confirm_unblocked)

        self.office.limits.wait_for_space(address, unblock)

    def _confirm_unblocked(self) -> None:
        if self.conn.closed or self._closing:
            return
        for session in self.sessions.values():
            if not session.blocked and session.sent != session.confirmed and session not in self._dirty:
                self._dirty.append(session)
        self._sync = True
        self._finish_read()

    # -- transactions -------------------------------------------------------------------------

    def _tx_session(self: CoreAdapter, session_id: int) -> ServerSession:
        session = self._session(session_id)
        if session.tx is None:
            raise RequestFailed(ErrorCode.INVALID, f"session {session_id} is not transacted")
        return session

    def on_commit(self: CoreAdapter, e: Commit) -> None:
        session = self._tx_session(e.session)
        server_session, name = self.server_session, session.tx.name
        try:
            server_session.commit(name, reopen=True)  # the session goes on in a new transaction
        except TransactionRolledBack as exc:
            self.reply(Result(e.corr, ErrorCode.TRANSACTION_ROLLED_BACK, f"transaction rolled back: {exc.reason}"))
            return
        finally:
            session.tx = server_session.transactions[name]
        self.reply(Result(e.corr), sync=True, transactional=True)

    def on_rollback(self: CoreAdapter, e: Rollback) -> None:
        session = self._tx_session(e.session)
        server_session, name = self.server_session, session.tx.name
        try:
            server_session.rollback(name, reopen=True)
        finally:
            session.tx = server_session.transactions[name]
        self.reply(Result(e.corr))
