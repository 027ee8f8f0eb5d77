"""STOMP 1.0/1.1/1.2 on the post office.

Frames from one read are handled in order; receipts that must wait for the disk (persistent
sends, commits, DISCONNECT) are collected and released by one store sync per read, so a
pipelining producer gets many receipts per fdatasync.
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
    RoutingType,
    now_ms,
)
from petrel.core.limits import AddressFull
from petrel.core.postoffice import RoutingError
from petrel.core.queue import Consumer, MessageReference
from petrel.core.selector import SelectorError, compile_selector
from petrel.core.transaction import Transaction, TransactionRolledBack
from petrel.server.adapters.stomp_large import LargeSends, deliver_large
from petrel.server.adapters.group_wait import wait_for_group
from petrel.server.adapters.stomp_render import message_prefix, receipt_bytes, render_message

if TYPE_CHECKING:
    from petrel.server.broker import Broker
    from petrel.server.connection import Connection

log = logging.getLogger("petrel.server.stomp")

# SEND headers that are STOMP's own, not message properties.
FRAME_HEADERS = frozenset(
    {"destination", "content-length", "receipt", "transaction", "persistent", "priority", "expires",
     "AMQ_SCHEDULED_DELAY", "AMQ_SCHEDULED_TIME", "content-type"}
)
DEFAULT_PREFETCH = 1000


class StompError(Exception):
    """A request we refuse: becomes an ERROR frame, then the connection closes."""


def parse_destination(dest: str) -> tuple[str, RoutingType | None]:
    if dest.startswith("/queue/"):
        return dest[7:], RoutingType.ANYCAST
    if dest.startswith("/topic/"):
        return dest[7:], RoutingType.MULTICAST
    return dest, None


class Subscription:
    __slots__ = ("id", "destination", "ack", "consumer", "durable_name", "prefix")

    def __init__(self, id: str, destination: str, ack: str, consumer: Consumer, durable_name: str | None) -> None:
        self.id = id
        self.destination = destination
        self.ack = ack
        self.consumer = consumer
        self.durable_name = durable_name
        self.prefix: bytes | None = None  # rendered "MESSAGE\nsubscription:..\ndestination:..\n"


class StompAdapter:
    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        # bodies over min_large_message_size stream to a file (stomp_large.py)
        self._large_over = broker.config.min_large_message_size if broker.large is not None else None
        self.codec = StompConnection(max_frame_size=broker.config.max_frame_size, stream_threshold=self._large_over)
        self._large = LargeSends(self)
        self._held = False  # a large body is being made durable: handle nothing until it is
        self._large_taken = False
        self.connected = False
        self.client_id: str | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self.by_consumer: dict[int, Subscription] = {}
        self.transactions: dict[str, Transaction] = {}
        self._deferred: list[bytes] | None = None  # receipts waiting for the next sync
        self._deferred_tx = False
        self._not_durable = False  # a store sync failed: no receipt goes out any more
        self._closing = False
        self._last_read = time.monotonic()
        self._hb_send: float = 0
        self._hb_recv: float = 0
        self._hb_timer = None
        self._blocked = False

    # -- input -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_read = time.monotonic()
        self._run(self.codec.receive_data, data)

    def _run(self, fn: Callable, *args) -> None:
        """Call `fn`, then handle the events buffered in the codec, in order."""
        codec = self.codec
        try:
            fn(*args)
            while not self._held:
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
        except StompError as exc:
            self.error(str(exc))
        except Exception as exc:  # never let one client take the broker down
            log.exception("internal error handling a frame from %s", self.conn.peer)
            self.error(f"internal error: {exc}")
        finally:
            self._release_deferred()

    def handle(self, frame: Frame) -> None:
        command = frame.command
        if command == "SEND":
            self.on_send(frame)
        elif command == "ACK" or command == "NACK":
            self.on_ack(frame, command == "ACK")
        elif command == "SUBSCRIBE":
            self.on_subscribe(frame)
        elif command == "UNSUBSCRIBE":
            self.on_unsubscribe(frame)
        elif command == "BEGIN":
            name = self._tx_name(frame)
            if name in self.transactions:
                raise StompError(f"transaction {name!r} is already open")
            self.transactions[name] = Transaction(name)
            self.receipt(frame)
        elif command == "COMMIT":
            tx = self._tx(frame)
            try:
                self.office.commit(tx)
            except TransactionRolledBack as exc:
                raise StompError(f"transaction {tx.name!r} rolled back: {exc}") from None
            finally:
                self.transactions.pop(tx.name, None)
            self.receipt(frame, durable=True, transactional=True)
        elif command == "ABORT":
            tx = self._tx(frame)
            self.transactions.pop(tx.name, None)
            self.office.rollback(tx)
            self.receipt(frame)
        elif command in ("CONNECT", "STOMP"):
            if self.connected:
                raise StompError("already connected")
            self.on_connect(frame)
        elif command == "DISCONNECT":
            self._release()  # unacknowledged messages are back in their queues before the RECEIPT
            self.receipt(frame, durable=True)
            self._closing = True
            self._after_deferred(self.conn.close)
        else:
            raise StompError(f"unexpected frame {command}")

    # -- frames ----------------------------------------------------------------------------

    def on_connect(self, frame: Frame) -> None:
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
            properties={k: v for k, v in headers.items() if k not in FRAME_HEADERS},
            durable=headers.get("persistent", "false").lower() == "true",
            timestamp=now,
        )
        ctype = headers.get("content-type")
        if ctype is not None:
            message.properties["content-type"] = ctype
        if "priority" in headers:
            message.priority = _int(headers, "priority", 0, 9)
        if "expires" in headers:
            message.expiration = _int(headers, "expires", 0, None)
        if SCHEDULED_DELAY in headers:
            message.scheduled = now + _int(headers, SCHEDULED_DELAY, 0, None)
        elif "AMQ_SCHEDULED_TIME" in headers:
            message.scheduled = _int(headers, "AMQ_SCHEDULED_TIME", 0, None)
        elif SCHEDULED_DELIVERY_TIME in headers:
            message.scheduled = _int(headers, SCHEDULED_DELIVERY_TIME, 0, None)
        tx = self._tx(frame) if "transaction" in headers else None
        if large is not None:  # from here the office owns the file (and drops it if it refuses)
            message.large = large[1]
            self._large_taken = True
        if self.office.grouping is not None and wait_for_group(
                self, name, message.properties, routing_type, lambda: self.on_send(frame, large),
                lambda reason: self._group_refused(reason, message)):
            return
        try:
            result = self.office.send(message, routing_type, tx)
        except (RoutingError, SelectorError, AddressFull) as exc:
            self.office.discard(message)
            raise StompError(str(exc)) from None
        self.receipt(frame, durable=message.durable)
        if result.blocked or result.throttled:
            self._block(message.address, quiet=not result.blocked)

    def _group_refused(self, reason: str, message: Message) -> None:
        self.office.discard(message)  # a large body's file goes with it
        raise StompError(reason)

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
        self._held = True
        if self.conn.transport is not None:
            self.conn.transport.pause_reading()

    def resume_held(self, fn: Callable[[], None]) -> None:
        """Run `fn` first, then the frames that waited behind it."""
        self._held = False
        if self.conn.closed:
            return
        if not self._blocked and self.conn.transport is not None:
            self.conn.transport.resume_reading()
        self._run(fn)

    def on_subscribe(self, frame: Frame) -> None:
        headers = frame.headers
        dest = headers.get("destination")
        if not dest:
            raise StompError("SUBSCRIBE needs a destination header")
        sub_id = headers.get("id")
        if sub_id is None:
            if self.codec.version != "1.0":
                raise StompError("SUBSCRIBE needs an id header")
            sub_id = dest
        if sub_id in self.subscriptions:
            raise StompError(f"subscription id {sub_id!r} is already in use on this connection")
        ack = headers.get("ack", "auto")
        if ack not in ("auto", "client", "client-individual"):
            raise StompError(f"ack mode must be auto, client or client-individual, not {ack!r}")
        selector_text = headers.get("selector") or None
        try:
            selector = compile_selector(selector_text) if selector_text else None
        except SelectorError as exc:
            raise StompError(str(exc)) from None
        durable_name = (
            headers.get("durable-subscription-name")
            or headers.get("activemq.subscriptionName")
            or headers.get("subscription-name")
        )
        client_id = headers.get("client-id") or self.client_id
        name, routing_type = parse_destination(dest)
        try:
            existing_queue = self.office.queues.get(name)
            if routing_type == RoutingType.ANYCAST and existing_queue is not None:
                address = self.office.addresses[existing_queue.address]
            else:
                address, routing_type = self.office.ensure_address_for(name, routing_type)
            existing = self.office.queues.get(name) if routing_type == RoutingType.ANYCAST else None
            if existing is not None:
                # A queue by that name, whatever its address (virtual-topic consumer queues).
                queue, consumer_selector = existing, selector
            elif routing_type == RoutingType.ANYCAST:
                queue = self.office.ensure_anycast_queue(address)
                consumer_selector = selector
            else:
                queue = self.office.subscribe_multicast(
                    address, filter=selector_text, client_id=client_id, subscription=durable_name
                )
                consumer_selector = None  # the subscription queue filters at routing
        except (RoutingError, SelectorError) as exc:
            raise StompError(str(exc)) from None
        window, window_bytes = self._window(headers, ack)
        consumer = Consumer(
            queue,
            self._deliver,
            selector=consumer_selector,
            window=window,
            window_bytes=window_bytes,
            auto_ack=(ack == "auto"),
        )
        consumer.paused = self.conn.writing_paused
        sub = Subscription(sub_id, dest, ack, consumer, durable_name)
        sub.prefix = self._message_prefix(sub_id, dest)
        self.subscriptions[sub_id] = sub
        self.by_consumer[consumer.id] = sub
        self.receipt(frame)
        queue.add_consumer(consumer)

    @staticmethod
    def _window(headers: dict[str, str], ack: str) -> tuple[int, int]:
        window = -1 if ack == "auto" else DEFAULT_PREFETCH
        window_bytes = -1
        if "activemq.prefetchSize" in headers:
            window = _int(headers, "activemq.prefetchSize", -1, None)
        if "consumer-window-size" in headers:
            window_bytes = _int(headers, "consumer-window-size", -1, None)
            if window_bytes == 0:  # Artemis: 0 means no buffering, one at a time
                window, window_bytes = 1, -1
        if window == 0:
            window = 1
        return window, window_bytes

    def on_unsubscribe(self, frame: Frame) -> None:
        headers = frame.headers
        sub_id = headers.get("id") or headers.get("destination")
        sub = self.subscriptions.pop(sub_id, None) if sub_id else None
        durable_name = headers.get("durable-subscription-name") or headers.get("activemq.subscriptionName")
        if sub is None and not durable_name:
            raise StompError(f"no subscription with id {sub_id!r}")
        if sub is not None:
            self.by_consumer.pop(sub.consumer.id, None)
            queue = sub.consumer.queue
            queue.remove_consumer(sub.consumer)
            durable_name = durable_name or None
        if durable_name:
            client_id = headers.get("client-id") or self.client_id
            qname = f"{client_id}.{durable_name}"
            if qname in self.office.queues:
                try:
                    self.office.delete_queue(qname)
                except RoutingError as exc:
                    raise StompError(str(exc)) from None
        self.receipt(frame)

    def on_ack(self, frame: Frame, positive: bool) -> None:
        headers = frame.headers
        version = self.codec.version
        ack_id = headers.get("id") if version == "1.2" else headers.get("message-id")
        if not ack_id:
            raise StompError(f"{'ACK' if positive else 'NACK'} needs an {'id' if version == '1.2' else 'message-id'} header")
        try:
            cid, _, seq_text = ack_id.partition(".")
            sub = self.by_consumer[int(cid)]
            seq = int(seq_text)
        except (KeyError, ValueError):
            raise StompError(f"no unacknowledged message with id {ack_id!r} on this connection") from None
        consumer = sub.consumer
        if seq not in consumer.delivering:
            raise StompError(f"no unacknowledged message with id {ack_id!r} on this connection")
        if sub.ack == "client":  # cumulative
            refs = []
            for s, ref in consumer.delivering.items():
                refs.append(ref)
                if s == seq:
                    break
        else:
            refs = [consumer.delivering[seq]]
        tx = self._tx(frame) if "transaction" in headers else None
        queue = consumer.queue
        for ref in refs:
            if tx is not None and positive and not queue.non_destructive:
                tx.hold_ack(ref)
            elif positive:
                queue.acknowledge(ref, consumer=consumer)
            else:
                queue.cancel(ref, redelivered=True, consumer=consumer)
        self.receipt(frame, durable=positive and tx is None)

    # -- output ----------------------------------------------------------------------------

    def _deliver(self, consumer: Consumer, ref: MessageReference) -> None:
        sub = self.by_consumer.get(consumer.id)
        if sub is None:
            return
        m = ref.message
        prefix = sub.prefix
        if prefix is not None and m.large is None:
            self.conn.write(render_message(prefix, consumer.id, ref, self.codec.version, sub.ack, self.codec._escaping))
            return
        headers = {str(k): str(v) for k, v in m.properties.items()}
        ack_id = f"{consumer.id}.{ref.seq}"
        headers["subscription"] = sub.id
        headers["message-id"] = ack_id
        headers["destination"] = sub.destination
        headers["persistent"] = "true" if m.durable else "false"
        headers["priority"] = str(m.priority)
        headers["expires"] = str(m.expiration)
        headers["timestamp"] = str(m.timestamp)
        if ref.delivery_count:
            headers["redelivered"] = "true"
        if self.codec.version == "1.2" and sub.ack != "auto":
            headers["ack"] = ack_id
        if m.large is not None:
            deliver_large(self, headers, m)
            return
        self.conn.write(self.codec.send(Frame("MESSAGE", headers, m.body)))

    def _message_prefix(self, sub_id: str, dest: str) -> bytes | None:
        return message_prefix(self.codec._escaping, sub_id, dest)

    def _receipt_frame(self, receipt_id: str) -> bytes:
        return receipt_bytes(self.codec, receipt_id)

    def receipt(self, frame: Frame, *, durable: bool = False, transactional: bool = False) -> None:
        receipt_id = frame.headers.get("receipt")
        if durable or self._deferred is not None:
            if self._deferred is None:
                self._deferred = []
            self._deferred_tx = self._deferred_tx or transactional
            if receipt_id is not None:
                self._deferred.append(self._receipt_frame(receipt_id))
            return
        if receipt_id is not None:
            self.conn.write(self._receipt_frame(receipt_id))

    def _after_deferred(self, fn: Callable[[], None]) -> None:
        if self._deferred is None:
            self._deferred = []
        self._deferred.append(fn)  # type: ignore[arg-type]

    def _release_deferred(self) -> None:
        """One sync for everything this read appended; then its receipts go out, in order."""
        pending, self._deferred = self._deferred, None
        transactional, self._deferred_tx = self._deferred_tx, False
        if not pending:
            return
        conn = self.conn

        def durable() -> None:
            if self._not_durable:
                return  # an earlier sync failed: the ERROR went out, nothing after it is confirmed
            for item in pending:
                if callable(item):
                    item()
                else:
                    conn.write(item)

        self.broker.store.sync(durable, transactional=transactional, failed=self._sync_failed)

    def _sync_failed(self, error: BaseException) -> None:
        """The store could not make this connection's frames durable: an ERROR naming the cause
        instead of their receipts (none of them, nor any later one, is confirmed)."""
        if self._not_durable:
            return
        self._not_durable = True
        if not self.conn.closed:
            self.error(f"not persisted: {error}; frames since the last receipt are not confirmed")

    def error(self, message: str, extra: dict[str, str] | None = None) -> None:
        log.info("STOMP error for %s: %s", self.conn.peer, message)
        headers = {"message": message.replace("\n", " ")[:1000], "content-type": "text/plain"}
        if extra:
            headers.update(extra)
        try:
            data = self.codec.send(Frame("ERROR", headers, message.encode()))
        except Exception:
            data = b"ERROR\nmessage:" + message.replace("\n", " ").encode()[:1000] + b"\n\n\x00"
        self._closing = True
        self.conn.write(data)
        self.conn.close()

    def _block(self, address: str, *, quiet: bool = False) -> None:
        """BLOCK policy, a full disk, or consumers far behind (`quiet`): stop reading this
        producer until there is space."""
        transport = self.conn.transport
        if transport is None or self._blocked:
            return
        self._blocked = True
        transport.pause_reading()
        if not quiet:
            log.info("producer %s blocked: address %s is full", self.conn.peer, address,
                     extra={"event": "address.blocked"})

        def unblock() -> None:
            self._blocked = False
            if not self.conn.closed:
                transport.resume_reading()

        self.office.limits.wait_for_space(address, unblock)

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

    def pause(self) -> None:
        for sub in self.subscriptions.values():
            sub.consumer.paused = True

    def resume(self) -> None:
        for sub in list(self.subscriptions.values()):
            sub.consumer.resume()

    def connection_lost(self) -> None:
        if self._hb_timer is not None:
            self._hb_timer.cancel()
        self._large.abort()
        self._release()

    def _release(self) -> None:
        """Roll back open transactions and close every subscription (its messages go back)."""
        for tx in list(self.transactions.values()):
            self.office.rollback(tx)
        self.transactions.clear()
        for sub in list(self.subscriptions.values()):
            queue = sub.consumer.queue
            if not queue.deleted:
                queue.remove_consumer(sub.consumer)
        self.subscriptions.clear()
        self.by_consumer.clear()

    # -- helpers ---------------------------------------------------------------------------

    def _tx_name(self, frame: Frame) -> str:
        name = frame.headers.get("transaction")
        if not name:
            raise StompError(f"{frame.command} needs a transaction header")
        return name

    def _tx(self, frame: Frame) -> Transaction:
        name = self._tx_name(frame)
        tx = self.transactions.get(name)
        if tx is None:
            raise StompError(f"transaction {name!r} is not open (send BEGIN first)")
        return tx


def _int(headers: dict[str, str], name: str, low: int | None, high: int | None) -> int:
    text = headers[name]
    try:
        value = int(text)
    except ValueError:
        raise StompError(f"header {name} must be an integer, not {text!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise StompError(f"header {name} out of range: {value}")
    return value
