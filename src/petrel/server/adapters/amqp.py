"""AMQP 1.0 on the post office, through the server session (`petrel.server.session`).

A translator: the codec's events from one read are handled in order and become session calls;
replies go out through the session's confirmations, so a disposition accepting a durable
message is written only after the store's sync (one per read), and every reply keeps the
order of the frames it answers. Deliveries to clients are written when the queue hands them
over (`amqp_links`).

This module holds the connection: protocol headers, SASL (PLAIN checked with `Access` like
STOMP's login, ANONYMOUS only when security allows anonymous clients), open/begin/end/close,
heart-beats (empty frames every half of the client's idle-time-out) and errors: a refusal of
the whole connection is a close with its AMQP condition. `amqp_links` holds attach, flow,
disposition and detach and the deliveries to clients; `amqp_incoming` transfers from clients
and the transaction coordinator; `amqp_convert` the message mapping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from petrel.codec.amqp import NEED_DATA, AmqpConnection, Empty, Frame, ProtocolHeader
from petrel.codec.amqp.errors import (
    ILLEGAL_STATE, INTERNAL_ERROR, NOT_ALLOWED, RESOURCE_LIMIT_EXCEEDED, UNAUTHORIZED_ACCESS,
    AmqpError, AmqpLocalError,
)
from petrel.codec.amqp.frames import AMQP, SASL
from petrel.codec.amqp.performatives import (
    ROLE_RECEIVER, SASL_AUTH, SASL_OK, Accepted, Attach, Begin, Close, Detach, Disposition, End, Error, Flow, Open,
    SaslInit, SaslMechanisms, SaslOutcome, Transfer,
)
from petrel.codec.amqp.sasl import ANONYMOUS, EXTERNAL, PLAIN, parse_plain
from petrel.codec.roles import Role
from petrel.core.message import Message, now_ms
from petrel.security.errors import AuthenticationFailed
from petrel.server.access import Access
from petrel.server.adapters.amqp_incoming import IncomingFrames
from petrel.server.adapters.amqp_links import HANDLE_MAX, Channel, LinkFrames, condition_of
from petrel.server.limits import watch_silence
from petrel.server.login import OffLoopLogin
from petrel.server.refusals import NotDurable, Refused
from petrel.server.session import ServerSession

if TYPE_CHECKING:
    from petrel.server.broker import Broker
    from petrel.server.connection import Connection

log = logging.getLogger("petrel.server.amqp")

#: The largest frame the broker takes (and offers in its open).
MAX_FRAME_SIZE = 256 * 1024
CHANNEL_MAX = 255


class AmqpAdapter(LinkFrames, IncomingFrames):
    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        config = broker.config
        self.codec = AmqpConnection(Role.SERVER, max_frame_size=MAX_FRAME_SIZE,
                                    max_message_size=max(config.max_frame_size, 1024 * 1024))
        self.access = Access(broker.security)
        self.session = ServerSession(broker, conn, self.access, run=self._run, on_sync_failed=self._sync_failed)
        self.channels: dict[int, Channel] = {}
        self.container_id: str | None = None
        self.sasl_done = False
        self.opened = False  # our open went out
        self.connected = False  # the client's open is answered: the handshake is done (server.limits)
        self.closing = False
        self._last_read = time.monotonic()
        self._beat: asyncio.TimerHandle | None = None
        self._login_task: OffLoopLogin | None = None
        self._next_txn = 0
        self._accepting: _AcceptRun | None = None  # the read's last accepted deliveries, one disposition
        self.now = 0  # now_ms() when the read being handled began
        self.temporary: set[str] = set()  # temporary queues of dynamic links, gone with the connection

    # -- input -----------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self._last_read = time.monotonic()
        self._run(self.codec.receive_data, data)

    def _run(self, fn: Callable, *args) -> None:
        """Call `fn`, then handle the events buffered in the codec, in order; then one flush."""
        codec, session = self.codec, self.session
        office, creator = self.office, self.office.creator
        office.creator = self.access.user  # queues created meanwhile are the user's
        self.now = now_ms()  # the time stamp of the messages this read brings
        try:
            fn(*args)
            while not session.held and not self.closing:
                event = codec.next_event()
                if event is NEED_DATA:
                    break
                self.handle(event)
        except AmqpError as exc:
            self.fail(exc.condition, exc.message)
        except Refused as exc:
            self.fail(condition_of(exc), str(exc))
        except Exception as exc:  # never let one client take the broker down
            log.exception("internal error handling a frame from %s", self.conn.peer)
            self.fail(INTERNAL_ERROR, f"internal error: {exc}")
        finally:
            office.creator = creator
            if self._accepting is not None:
                self._seal()
            session.flush()

    def handle(self, event) -> None:
        if type(event) is Frame:
            p = event.performative
            kind = type(p)
            if kind is Transfer:
                self.on_transfer(self._channel(event.channel), event)
            elif kind is Flow:
                self.on_flow(self._channel(event.channel), p)
            elif kind is Disposition:
                self.on_disposition(self._channel(event.channel), p)
            elif kind is Attach:
                self.on_attach(self._channel(event.channel), p)
            elif kind is Detach:
                self.on_detach(self._channel(event.channel), p)
            elif kind is Begin:
                self.on_begin(event.channel, p)
            elif kind is End:
                self.on_end(event.channel, p)
            elif kind is Open:
                self.on_open(p)
            elif kind is Close:
                self.on_close(p)
            elif kind is SaslInit:
                self.on_sasl_init(p)
            else:
                raise AmqpError(ILLEGAL_STATE, f"unexpected {kind.__name__}")
        elif type(event) is ProtocolHeader:
            self.on_header(event.protocol_id)
        elif type(event) is Empty:
            pass

    def reply(self, channel: int, performative, payload: bytes = b"", *, durable: bool = False,
              transactional: bool = False) -> None:
        """Send `performative` once this read is handled (after its sync when `durable`)."""
        if self._accepting is not None:
            self._seal()
        self.session.confirm(self.codec.send(channel, performative, payload), durable=durable,
                             transactional=transactional)

    def accept(self, channel: int, delivery_id: int, durable: bool, sent: Message | None = None) -> None:
        """Accept and settle the client's transfer `delivery_id` once this read is handled (after
        its sync when `durable`; or once `sent`, the message it carried, is consumed, if that
        comes first), like `reply` with a disposition; transfers accepted one after another,
        with consecutive delivery ids, share one disposition (first..last)."""
        session = self.session
        out = session.confirmations.out
        run = self._accepting
        if (run is not None and run.out is out and run.index == len(out) - 1 and run.channel == channel
                and run.last + 1 == delivery_id):
            run.last = delivery_id
            if durable:
                session.need_sync(sent=sent)
            return
        if run is not None:
            self._seal()
        self._accepting = run = _AcceptRun(self, out, len(out), channel, delivery_id)
        session.confirm(run, durable=durable, sent=sent if durable else None)

    def _seal(self) -> None:
        """The pending run of accepted deliveries can grow no more: its disposition is encoded in
        its place (before anything else is encoded: a close after it would refuse it)."""
        run, self._accepting = self._accepting, None
        if run is not None and run.index < len(run.out) and run.out[run.index] is run:
            run.out[run.index] = run.encode()

    def _channel(self, number: int) -> Channel:
        ch = self.channels.get(number)
        if ch is None:
            raise AmqpError(ILLEGAL_STATE, f"channel {number} has no session (begin first)")
        return ch

    # -- headers and SASL ------------------------------------------------------------------------

    def on_header(self, protocol_id: int) -> None:
        if protocol_id == SASL:
            if self.sasl_done:
                raise AmqpError(ILLEGAL_STATE, "a second SASL exchange")
            mechanisms = [PLAIN]
            if self.access.enabled and self.conn.peer_subject is not None and self.broker.security.certificate_users:
                mechanisms.insert(0, EXTERNAL)  # the TLS client certificate names the user
            if not self.access.enabled or self.broker.security.allow_anonymous:
                mechanisms.append(ANONYMOUS)
            self.conn.write(self.codec.send_header(SASL) + self.codec.send(0, SaslMechanisms(
                sasl_server_mechanisms=tuple(mechanisms))))
            return
        self.conn.write(self.codec.send_header(AMQP))
        if self.access.enabled and self.access.subject is None:
            # no SASL: the user its TLS client certificate names, or an anonymous client if allowed
            security, subject_dn = self.broker.security, self.conn.peer_subject
            try:
                if subject_dn is not None and security.certificate_users:
                    self.access.login(security.login_certificate(subject_dn, self.conn.peer))
                else:
                    self.access.login(security.login(None, None, self.conn.peer))
            except AuthenticationFailed as exc:
                self.conn.write(self.codec.send(0, Open(container_id=self._container())))
                self.opened = True
                self.fail(UNAUTHORIZED_ACCESS, f"{exc} (use SASL PLAIN)")

    def on_sasl_init(self, init) -> None:
        mechanism = str(init.mechanism)
        if mechanism == PLAIN:
            _, user, password = parse_plain(init.initial_response)
        elif mechanism == ANONYMOUS or (mechanism == EXTERNAL and self.conn.peer_subject is not None):
            user = password = None  # (EXTERNAL: tls.login takes the certificate's user)
        else:
            self._sasl_outcome(False, f"SASL mechanism {mechanism!r} is not offered")
            return
        if not self.access.enabled:
            self._sasl_outcome(True)
            return
        self._login_task = OffLoopLogin(
            self.session, self.access, self.broker, self.conn, user or None, password,
            on_success=lambda: self._sasl_outcome(True),
            on_refused=lambda why: self._sasl_outcome(False, why),
            log=log)

    def _sasl_outcome(self, ok: bool, why: str = "") -> None:
        self.conn.write(self.codec.send(0, SaslOutcome(code=SASL_OK if ok else SASL_AUTH)))
        if ok:
            self.sasl_done = True
            return
        log.info("AMQP login refused for %s: %s", self.conn.peer, why)
        self.closing = True
        self.conn.close()

    # -- connection and sessions -------------------------------------------------------------------

    def _container(self) -> str:
        return f"petrel-{self.broker.config.name}"

    def on_open(self, p) -> None:
        self.container_id = p.container_id
        ttl = self.broker.config.connection_ttl
        self.reply(0, Open(
            container_id=self._container(), max_frame_size=MAX_FRAME_SIZE, channel_max=CHANNEL_MAX,
            idle_time_out=ttl if ttl > 0 else None,
            offered_capabilities=("ANONYMOUS-RELAY", "DELAYED_DELIVERY", "SHARED-SUBS"),
            properties={"product": "Petrel", "version": str(self.broker.version)},
        ))
        self.opened = True
        self.connected = True
        if p.idle_time_out:  # the client closes us after idle_time_out without a frame: beat at half
            self._start_beats(max(int(p.idle_time_out) / 2000, 0.05))
        watch_silence(self.conn, ttl, lambda: self._last_read,
                      lambda: self.session.blocked or self.session.held, "idle-time-out, nothing from the client")

    def _start_beats(self, every: float) -> None:
        def beat() -> None:
            if self.conn.closed or self.closing:
                return
            self.conn.write(self.codec.send_empty())
            self._beat = self.conn.call_later(every, beat)

        self._beat = self.conn.call_later(every, beat)

    def on_begin(self, channel: int, p) -> None:
        if p.remote_channel is not None:
            raise AmqpError(NOT_ALLOWED, "a client's begin has no remote-channel")
        if channel in self.channels:
            raise AmqpError(ILLEGAL_STATE, f"channel {channel} is already in use")
        if channel > CHANNEL_MAX:
            raise AmqpError(RESOURCE_LIMIT_EXCEEDED, f"channel {channel} is over channel-max {CHANNEL_MAX}")
        ch = self.channels[channel] = Channel(channel, int(p.next_outgoing_id), int(p.incoming_window))
        self.reply(channel, Begin(remote_channel=channel, next_outgoing_id=ch.next_outgoing_id,
                                  incoming_window=ch.incoming_window, outgoing_window=0x7FFFFFFF, handle_max=HANDLE_MAX))

    def on_end(self, channel: int, p) -> None:
        ch = self._channel(channel)
        for link in list(ch.links.values()):
            self.drop_link(ch, link, closed=False)
        del self.channels[channel]
        self.reply(channel, End())

    def on_close(self, p) -> None:
        if p.error is not None:
            log.info("AMQP client %s closed with %s", self.conn.peer, p.error)
        self._release()
        self.reply(0, Close())
        self.closing = True
        self.session.confirm(self.conn.close)

    # -- errors and the end ----------------------------------------------------------------------

    def fail(self, condition: str, description: str) -> None:
        """Close the connection with an error (after an open of ours, as the specification asks)."""
        log.info("AMQP error for %s: %s %s", self.conn.peer, condition, description)
        if self.closing:
            return
        self.closing = True
        if self._accepting is not None:
            self._seal()
        self._release()  # no more deliveries: what the links held goes back now
        data = b""
        try:
            if not self.opened and self.codec.our_phase in ("header", "opening"):
                if self.codec.our_phase == "header":
                    data += self.codec.send_header(AMQP)
                data += self.codec.send(0, Open(container_id=self._container()))
                self.opened = True
            if self.opened:
                data += self.codec.send(0, Close(error=Error(condition=condition, description=description[:1000])))
        except Exception:  # the codec cannot say it (a SASL phase): the socket closes without a word
            log.debug("no close frame for %s", self.conn.peer, exc_info=True)
        session = self.session
        if session.not_durable:  # nothing more is confirmed: the close goes out now
            if data:
                self.conn.write(data)
            self.conn.close()
            return
        if data:  # after the replies of the frames before it (our open among them), in order
            session.confirm(data)
        session.confirm(self.conn.close)
        session.flush()

    def error(self, message: str, extra: dict | None = None) -> None:
        """A limit refuses the connection (`server.limits.refuse`)."""
        self.fail(RESOURCE_LIMIT_EXCEEDED, message)

    def _sync_failed(self, error: NotDurable) -> None:
        self.fail(INTERNAL_ERROR, f"{error}; deliveries since the last disposition are not confirmed")

    def connection_lost(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
        if self._login_task is not None:
            self._login_task.cancel()
        self._release()
        self.session.release()
        for name in list(self.temporary):
            self.delete_temporary(name)

    def _release(self) -> None:
        for ch in list(self.channels.values()):
            for link in list(ch.links.values()):
                self.drop_link(ch, link, closed=False)
        self.channels.clear()

    def pause(self) -> None:
        self.session.pause()

    def resume(self) -> None:
        self.session.resume()

    def new_txn_id(self) -> bytes:
        self._next_txn += 1
        return self._next_txn.to_bytes(4, "big")


class _AcceptRun:
    """Consecutive deliveries accepted in one read: one disposition, first..last, in the
    session's confirmations (`AmqpAdapter.accept`). Encoded when sealed; if a flush ever came
    first, it encodes itself when it is written."""

    __slots__ = ("adapter", "out", "index", "channel", "first", "last")

    def __init__(self, adapter: AmqpAdapter, out: list, index: int, channel: int, first: int) -> None:
        self.adapter = adapter
        self.out = out
        self.index = index
        self.channel = channel
        self.first = self.last = first

    def encode(self) -> bytes:
        return self.adapter.codec.send(self.channel, Disposition(
            role=ROLE_RECEIVER, first=self.first, last=self.last if self.last != self.first else None,
            settled=True, state=Accepted()))

    def __call__(self) -> None:
        adapter = self.adapter
        if adapter._accepting is self:
            adapter._accepting = None
        try:
            adapter.conn.write(self.encode())
        except AmqpLocalError:  # our close went out meanwhile: nothing more is said
            pass
