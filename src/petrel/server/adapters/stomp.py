"""STOMP 1.0/1.1/1.2 on the post office, through the server session (`petrel.server.session`).

A translator: frames from one read are handled in order and become session calls (sends,
acks, transactions, consumers); receipts that must wait for the disk (persistent sends,
commits, DISCONNECT) are session confirmations, released by one store sync per read and in
read order, so a pipelining producer gets many receipts per fdatasync. Refusals
(`petrel.server.refusals`) become an ERROR frame, then the connection closes.

This module holds the connection (read loop, CONNECT and heart-beats, SEND, transactions,
receipts, errors); `stomp_subscriptions` the subscriptions
(SUBSCRIBE, UNSUBSCRIBE, ACK/NACK, MESSAGE delivery); `stomp_headers` the headers SEND and
SUBSCRIBE share and `StompError`; `stomp_large` large bodies; `stomp_render` the rendering of
MESSAGE and RECEIPT frames.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from petrel.codec.errors import RemoteProtocolError
from petrel.codec.stomp.connection import StompConnection, negotiate_heartbeat, parse_heartbeat
from petrel.codec.stomp.frames import NEED_DATA, Frame, Heartbeat
from petrel.core.message import (
    SCHEDULED_DELAY,
    SCHEDULED_DELIVERY_TIME,
    LargeBody,
    Message,
    now_ms,
)
from petrel.core.message_props import CONTENT_TYPE, INTERNAL_PREFIXES
from petrel.server.adapters.openwire_bodies import KIND as JMS_KIND
from petrel.server.adapters.openwire_bodies import TEXT as JMS_TEXT
from petrel.server.adapters.stomp_headers import StompError, int_header, parse_destination
from petrel.server.adapters.stomp_large import LargeSends
from petrel.server.adapters.stomp_render import receipt_bytes
from petrel.server.adapters.stomp_subscriptions import Subscription, SubscriptionFrames
from petrel.security.errors import NotAuthorized
from petrel.server.access import Access
from petrel.server.adapters.stomp_login import log_in
from petrel.server.limits import watch_silence
from petrel.server.refusals import NotDurable, Refused
from petrel.server.session import ServerSession

if TYPE_CHECKING:
    from petrel.server.broker import Broker
    from petrel.server.connection import Connection

log = logging.getLogger("petrel.server.stomp")

# SEND headers that are STOMP's own, not message properties.
FRAME_HEADERS = frozenset(
    {"destination", "content-length", "receipt", "transaction", "persistent", "priority", "expires",
     "AMQ_SCHEDULED_DELAY", "AMQ_SCHEDULED_TIME", "content-type"}
)


class StompAdapter(SubscriptionFrames):
    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        # bodies over min_large_message_size stream to a file (stomp_large.py)
        self._large_over = broker.config.min_large_message_size if broker.large is not None else None
        self.codec = StompConnection(max_frame_size=broker.config.max_frame_size, stream_threshold=self._large_over)
        self._large = LargeSends(self)
        self._large_taken = False
        self.connected = False
        self.client_id: str | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self.by_consumer: dict[int, Subscription] = {}
        self._closing = False
        self._last_read = time.monotonic()
        self._hb_send: float = 0
        self._hb_recv: float = 0
        self._hb_timer = None
        self.access = Access(broker.security)  # who logged in, what it may do (CONNECT's login/passcode)
        self._login_task = None
        # sends, acks, transactions, consumers, receipts after the disk, holds, BLOCK
        self.session = ServerSession(broker, conn, self.access, run=self._run, on_sync_failed=self._sync_failed)

    @property
    def subject(self):
        return self.access.subject

    # -- input -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_read = time.monotonic()
        self._run(self.codec.receive_data, data)

    def _run(self, fn: Callable, *args) -> None:
        """Call `fn`, then handle the events buffered in the codec, in order."""
        codec = self.codec
        session = self.session
        office, creator = self.office, self.office.creator
        office.creator = self.access.user  # the queues created meanwhile are the user's (max_queues_per_user)
        try:
            fn(*args)
            while not session.held and not self._closing:
                event = codec.next_event()
                if event is NEED_DATA:
                    break
                if isinstance(event, Heartbeat):
                    continue
                if type(event) is not Frame:  # part of a frame whose body is streamed
                    self._large.on_event(event)
                    continue
                self.handle(event)
                if self._closing:
                    break
        except RemoteProtocolError as exc:
            self.error(exc.message, getattr(exc, "hint", None) or {})
        except (StompError, Refused, NotAuthorized) as exc:
            self.error(str(exc))
        except Exception as exc:  # never let one client take the broker down
            log.exception("internal error handling a frame from %s", self.conn.peer)
            self.error(f"internal error: {exc}")
        finally:
            office.creator = creator
            session.flush()

    def handle(self, frame: Frame) -> None:
        command = frame.command
        if not self.connected and self.access.enabled and command not in ("CONNECT", "STOMP"):
            raise StompError(f"{command} before CONNECT: log in first (login and passcode headers)")
        if command == "SEND":
            self.on_send(frame)
        elif command == "ACK" or command == "NACK":
            self.on_ack(frame, command == "ACK")
        elif command == "SUBSCRIBE":
            self.on_subscribe(frame)
        elif command == "UNSUBSCRIBE":
            self.on_unsubscribe(frame)
        elif command == "BEGIN":
            self.session.begin(self._tx_name(frame))
            self.receipt(frame)
        elif command == "COMMIT":
            self.session.commit(self._tx_name(frame))
            self.receipt(frame, durable=True, transactional=True)
        elif command == "ABORT":
            self.session.rollback(self._tx_name(frame))
            self.receipt(frame)
        elif command in ("CONNECT", "STOMP"):
            if self.connected:
                raise StompError("already connected")
            self.on_connect(frame)
        elif command == "DISCONNECT":
            self._release()  # unacknowledged messages are back in their queues before the RECEIPT
            self.receipt(frame, durable=True)
            self._closing = True
            self.session.confirm(self.conn.close)
        else:
            raise StompError(f"unexpected frame {command}")

    # -- frames ----------------------------------------------------------------------------

    def on_connect(self, frame: Frame) -> None:
        if self.access.enabled and self.access.subject is None:
            log_in(self, frame)  # handles this frame again once logged in
            return
        headers = frame.headers
        version = self.codec.negotiate(headers.get("accept-version"))
        if version is None:
            self.conn.write(
                self.codec.send(
                    Frame("ERROR", {"version": "1.0,1.1,1.2", "content-type": "text/plain",
                                    "message": "supported protocol versions are 1.0 1.1 1.2"},
                          b"Supported protocol versions are 1.0 1.1 1.2")
                )
            )
            self._closing = True
            self.conn.close()
            return
        self.connected = True
        self.client_id = headers.get("client-id") or None
        reply = {"version": version, "server": f"Petrel/{self.broker.version}", "session": uuid.uuid4().hex}
        if version != "1.0":
            # The server beats at its own rate (or slower if the client asks), and expects the
            # client at the rate the client offered (never faster than stomp_heartbeat_min).
            cx, cy = parse_heartbeat(headers.get("heart-beat"))
            sx, _ = self.broker.config.stomp_heartbeat
            expect_every = max(cx, self.broker.config.stomp_heartbeat_min) if cx else 0
            send_every, _ = negotiate_heartbeat((cx, cy), (sx, expect_every))
            reply["heart-beat"] = f"{sx},{expect_every}"
            self._start_heartbeat(send_every, expect_every)
        if not self._hb_recv:  # no heart-beats from the client: connection_ttl applies, as in Artemis
            reads = self.session.reads  # paused (BLOCK, a hold): we stopped reading, not the client
            watch_silence(self.conn, self.broker.config.connection_ttl, lambda: self._last_read,
                          lambda: reads.paused, "connection_ttl, no heart-beats agreed")
        self.conn.write(self.codec.send(Frame("CONNECTED", reply)))
        self.receipt(frame)

    def on_send(self, frame: Frame, large: tuple[int, LargeBody] | None = None) -> None:
        """`large`: the id and file of a body streamed to disk (see `send_large`)."""
        if large is None and self._large_over is not None and len(frame.body) > self._large_over:
            self._large.whole(frame)
            return
        headers = frame.headers
        dest = headers.get("destination")
        if not dest:
            raise StompError("SEND needs a destination header")
        name, routing_type = parse_destination(dest)
        now = now_ms()
        message = Message(
            id=large[0] if large else self.broker.store.next_id(),
            address=name,
            body=frame.body,
            # (other protocols' internal properties are not a client's to set)
            properties={k: v for k, v in headers.items()
                        if k not in FRAME_HEADERS and (k[:1] != "_" or not k.startswith(INTERNAL_PREFIXES))},
            durable=headers.get("persistent", "false").lower() == "true",
            timestamp=now,
        )
        ctype = headers.get(CONTENT_TYPE)
        if ctype is not None:
            message.properties[CONTENT_TYPE] = ctype
        if "content-length" not in headers:  # a text frame: a JMS consumer's TextMessage (ActiveMQ's rule)
            message.properties[JMS_KIND] = int(JMS_TEXT)
        if "priority" in headers:
            message.priority = int_header(headers, "priority", 0, 9)
        if "expires" in headers:
            message.expiration = int_header(headers, "expires", 0, None)
        if SCHEDULED_DELAY in headers:
            message.scheduled = now + int_header(headers, SCHEDULED_DELAY, 0, None)
        elif "AMQ_SCHEDULED_TIME" in headers:
            message.scheduled = int_header(headers, "AMQ_SCHEDULED_TIME", 0, None)
        elif SCHEDULED_DELIVERY_TIME in headers:
            message.scheduled = int_header(headers, SCHEDULED_DELIVERY_TIME, 0, None)
        tx = self._tx_name(frame) if "transaction" in headers else None
        if large is not None:  # from here the session owns the file (and drops it if it refuses)
            message.large = large[1]
            self._large_taken = True
        durable = message.durable
        sent = message if tx is None else None  # (its consumption may confirm it: `Confirmations`)
        if self.office.grouping is None:  # routed now (no grouping decision to wait for)
            self.session.send(message, routing_type, tx)
            if durable or "receipt" in headers:
                self.receipt(frame, durable=durable, sent=sent)
            return
        self.session.send(message, routing_type, tx, lambda result: self.receipt(frame, durable=durable, sent=sent))

    def send_large(self, headers: dict[str, str], message_id: int, body: LargeBody) -> None:
        """A SEND whose body is already in its file, named for `message_id`."""
        self._large_taken = False
        try:
            self.on_send(Frame("SEND", headers), (message_id, body))
        finally:
            if not self._large_taken:  # refused before the office saw it
                self.broker.large.delete(body)

    def hold(self) -> None:
        """Handle nothing more (and read nothing) until `resume_held`."""
        self.session.hold()

    def resume_held(self, fn: Callable[[], None]) -> None:
        """Run `fn` first, then the frames that waited behind it."""
        self.session.resume_held(fn)

    # -- receipts and errors ---------------------------------------------------------------

    def _receipt_frame(self, receipt_id: str) -> bytes:
        return receipt_bytes(self.codec, receipt_id)

    def receipt(self, frame: Frame, *, durable: bool = False, transactional: bool = False,
                sent: Message | None = None) -> None:
        """The frame's RECEIPT, if it asked for one, once this read is handled (after its sync
        when `durable`, or once `sent`, the message a SEND carried, is consumed); a durable
        frame without a receipt still makes the read's later receipts wait for the sync."""
        receipt_id = frame.headers.get("receipt")
        if receipt_id is not None:
            self.session.confirmations.add(receipt_bytes(self.codec, receipt_id), durable, transactional, sent)
        elif durable:
            self.session.need_sync(transactional, sent)

    def _sync_failed(self, error: NotDurable) -> None:
        """The store could not make this connection's frames durable: an ERROR naming the cause
        instead of their receipts (none of them, nor any later one, is confirmed)."""
        self.error(f"{error}; frames since the last receipt are not confirmed", now=True)

    def error(self, message: str, extra: dict[str, str] | None = None, *, now: bool = False) -> None:
        """An ERROR frame, then close: after the receipts of what came before it, in order
        (`now`: at once, when nothing more is confirmed)."""
        if self._closing and not now:
            return
        log.info("STOMP error for %s: %s", self.conn.peer, message)
        headers = {"message": message.replace("\n", " ")[:1000], "content-type": "text/plain"}
        if extra:
            headers.update(extra)
        try:
            data = self.codec.send(Frame("ERROR", headers, message.encode()))
        except Exception:
            data = b"ERROR\nmessage:" + message.replace("\n", " ").encode()[:1000] + b"\n\n\x00"
        self._closing = True
        if now or self.session.not_durable:
            self.conn.write(data)
            self.conn.close()
            return
        session = self.session
        session.confirm(data)
        session.confirm(self.conn.close)
        session.flush()

    # -- heart-beats -----------------------------------------------------------------------

    def _start_heartbeat(self, send_every: int, expect_every: int) -> None:
        self._hb_send = send_every / 1000
        self._hb_recv = expect_every / 1000
        if self._hb_send or self._hb_recv:
            self._schedule_heartbeat()

    def _schedule_heartbeat(self) -> None:
        intervals = [t for t in (self._hb_send, self._hb_recv) if t]
        self._hb_timer = self.conn.call_later(min(intervals) / 2, self._heartbeat_tick)

    def _heartbeat_tick(self) -> None:
        if self.conn.closed:
            return
        now = time.monotonic()
        if self._hb_recv and now - self._last_read > self._hb_recv * 2 + 1.0:
            log.info("closing %s: no heart-beat for %.1fs", self.conn.peer, now - self._last_read)
            self._closing = True
            self.conn.close(after_flush=False)
            return
        if self._hb_send:
            self.conn.write(self.codec.send_heartbeat())
        self._schedule_heartbeat()

    # -- lifecycle -------------------------------------------------------------------------

    def connection_lost(self) -> None:
        if self._hb_timer is not None:
            self._hb_timer.cancel()
        self._large.abort()
        self.session.release()
        self.subscriptions.clear()
        self.by_consumer.clear()

    def _release(self) -> None:
        """Roll back open transactions and close every subscription (its messages go back)."""
        self.session.rollback_all()
        self.session.close_consumers()
        self.subscriptions.clear()
        self.by_consumer.clear()

    # -- helpers ---------------------------------------------------------------------------

    def _tx_name(self, frame: Frame) -> str:
        name = frame.headers.get("transaction")
        if not name:
            raise StompError(f"{frame.command} needs a transaction header")
        return name


