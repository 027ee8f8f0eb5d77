"""STOMP subscriptions: SUBSCRIBE, UNSUBSCRIBE, ACK and NACK, and the MESSAGE frames
delivered to them.

A mixin of `StompAdapter` (it uses the adapter's codec, connection, receipts and
transactions). Each SUBSCRIBE becomes a `Consumer` on a queue (an anycast queue, a
multicast subscription queue, or a durable one named ``<client-id>.<name>``); its window
comes from ``activemq.prefetchSize`` and ``consumer-window-size``. An ACK or NACK names a
delivery by ``<consumer id>.<seq>``; in ``client`` mode it covers every earlier one too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.cluster.internal_names import internal_name_problem
from petrel.codec.stomp.frames import Frame
from petrel.core.message import RoutingType
from petrel.core.postoffice import RoutingError
from petrel.core.queue import Consumer, MessageReference
from petrel.core.selector import SelectorError, compile_selector
from petrel.server.adapters.stomp_headers import StompError, int_header, parse_destination
from petrel.server.adapters.stomp_large import deliver_large
from petrel.server.adapters.stomp_render import message_prefix, render_message

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
        if (refused := internal_name_problem(self, name)) is not None:  # the cluster's $.petrel.* queues
            raise StompError(refused)
        self.access.subscribe(self.office, name, routing_type, filter=selector_text,
                              durable_queue=f"{client_id}.{durable_name}" if durable_name and client_id else None)
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
            queue = sub.consumer.queue
            queue.remove_consumer(sub.consumer)
            durable_name = durable_name or None
        if durable_name:
            client_id = headers.get("client-id") or self.client_id
            qname = f"{client_id}.{durable_name}"
            if qname in self.office.queues:
                self.access.delete_queue(self.office.queues[qname])
                try:
                    self.office.delete_queue(qname)
                except RoutingError as exc:
                    raise StompError(str(exc)) from None
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

    def _deliver(self: StompAdapter, consumer: Consumer, ref: MessageReference) -> None:
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

    def _message_prefix(self: StompAdapter, sub_id: str, dest: str) -> bytes | None:
        return message_prefix(self.codec._escaping, sub_id, dest)

    # -- flow ------------------------------------------------------------------------------

    def pause(self: StompAdapter) -> None:
        for sub in self.subscriptions.values():
            sub.consumer.paused = True

    def resume(self: StompAdapter) -> None:
        for sub in list(self.subscriptions.values()):
            sub.consumer.resume()
