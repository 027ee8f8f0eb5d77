"""STOMP subscriptions: SUBSCRIBE, UNSUBSCRIBE, ACK and NACK, and the MESSAGE frames
delivered to them.

A mixin of `StompAdapter` (it uses the adapter's codec, connection, receipts and server
session). Each SUBSCRIBE becomes a `Consumer` on the queue the session opens (an anycast
queue, a multicast subscription queue, or a durable one named ``<client-id>.<name>``); its window
comes from ``activemq.prefetchSize`` and ``consumer-window-size``. An ACK or NACK names a
delivery by ``<consumer id>.<seq>``; in ``client`` mode it covers every earlier one too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.codec.stomp.frames import Frame
from petrel.core.queue import Consumer, MessageReference
from petrel.server.adapters.stomp_headers import StompError, int_header, parse_destination
from petrel.server.adapters.stomp_large import deliver_large
from petrel.server.adapters.stomp_render import headers_of, message_prefix, render_message

if TYPE_CHECKING:
    from petrel.server.adapters.stomp import StompAdapter

__all__ = ["DEFAULT_PREFETCH", "Subscription", "SubscriptionFrames"]

DEFAULT_PREFETCH = 1000


class Subscription:
    __slots__ = ("id", "destination", "ack", "consumer", "durable_name", "prefix")

    def __init__(self, id: str, destination: str, ack: str, consumer: Consumer, durable_name: str | None) -> None:
        self.id = id
        self.destination = destination
        self.ack = ack
        self.consumer = consumer
        self.durable_name = durable_name
        self.prefix: bytes | None = None  # rendered "MESSAGE\nsubscription:..\ndestination:..\n"


class SubscriptionFrames:
    """SUBSCRIBE, UNSUBSCRIBE, ACK and NACK, MESSAGE delivery, and pausing deliveries."""

    def on_subscribe(self: StompAdapter, frame: Frame) -> None:
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
        durable_name = (
            headers.get("durable-subscription-name")
            or headers.get("activemq.subscriptionName")
            or headers.get("subscription-name")
        )
        client_id = headers.get("client-id") or self.client_id
        name, routing_type = parse_destination(dest)
        session = self.session
        queue, consumer_selector = session.open_queue(name, routing_type, selector=selector_text,
                                                      client_id=client_id, durable_name=durable_name)
        window, window_bytes = self._window(headers, ack)
        consumer = Consumer(
            queue,
            self._deliver,
            selector=consumer_selector,
            window=window,
            window_bytes=window_bytes,
            auto_ack=(ack == "auto"),
        )
        session.add_consumer(consumer)
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
            window = int_header(headers, "activemq.prefetchSize", -1, None)
        if "consumer-window-size" in headers:
            window_bytes = int_header(headers, "consumer-window-size", -1, None)
            if window_bytes == 0:  # Artemis: 0 means no buffering, one at a time
                window, window_bytes = 1, -1
        if window == 0:
            window = 1
        return window, window_bytes

    def on_unsubscribe(self: StompAdapter, frame: Frame) -> None:
        headers = frame.headers
        sub_id = headers.get("id") or headers.get("destination")
        sub = self.subscriptions.pop(sub_id, None) if sub_id else None
        durable_name = headers.get("durable-subscription-name") or headers.get("activemq.subscriptionName")
        if sub is None and not durable_name:
            raise StompError(f"no subscription with id {sub_id!r}")
        if sub is not None:
            self.by_consumer.pop(sub.consumer.id, None)
            self.session.remove_consumer(sub.consumer)
            durable_name = durable_name or None
        if durable_name:
            self.session.delete_durable(headers.get("client-id") or self.client_id, durable_name)
        self.receipt(frame)

    def on_ack(self: StompAdapter, frame: Frame, positive: bool) -> None:
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
        session = self.session
        refs = session.refs_through(consumer, seq) if sub.ack == "client" else [consumer.delivering[seq]]
        tx = self._tx_name(frame) if "transaction" in headers else None
        if positive:
            session.acknowledge(consumer, refs, tx)
        else:
            if tx is not None:
                session.transaction(tx)  # (a NACK names an open transaction, or is refused)
            session.cancel(consumer, refs)
        self.receipt(frame, durable=positive and tx is None)

    # -- output ----------------------------------------------------------------------------

    def _deliver(self: StompAdapter, consumer: Consumer, ref: MessageReference) -> None:
        sub = self.by_consumer.get(consumer.id)
        if sub is None:
            return
        m = ref.message
        prefix = sub.prefix
        if prefix is not None and m.large is None:
            self.conn.write(render_message(prefix, consumer.id, ref, self.codec.version, sub.ack, self.codec._escaping))
            return
        headers = headers_of(m.properties)
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

    def _message_prefix(self: StompAdapter, sub_id: str, dest: str) -> bytes | None:
        return message_prefix(self.codec._escaping, sub_id, dest)

    # -- flow ------------------------------------------------------------------------------

    def pause(self: StompAdapter) -> None:
        self.session.pause()

    def resume(self: StompAdapter) -> None:
        self.session.resume()
