"""OpenWire producers: ProducerInfo, sends (to one destination or each of a composite one:
`openwire_destinations`), and producer flow control. A mixin of `OpenWireAdapter`.

A producer with a window (the client's ``jms.producerWindowSize``, in ProducerInfo) counts the
bytes of what it sends without asking for a response (non-persistent messages, async sends,
sends in a transaction) and waits when they reach its window; each such message is answered
with a ProducerAck of its size, as ActiveMQ sizes it (1,024 bytes, plus its marshalled
properties and body), once the message is routed (and on disk, for a persistent one outside a
transaction), so a producer with a window is held back by the broker, never blocked for good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.codec.openwire import Message as OwMessage, ProducerAck, ProducerId, ProducerInfo, Response, encode_map
from petrel.server.adapters.openwire_destinations import send_targets
from petrel.server.adapters.openwire_messages import to_message
from petrel.server.refusals import Refused

if TYPE_CHECKING:
    from petrel.server.adapters.openwire import OpenWireAdapter

#: What ActiveMQ counts for a message besides its properties and body (Message.getSize).
MESSAGE_OVERHEAD = 1024


def message_size(m: OwMessage) -> int:
    """A message's size as the client counts it against its producer window."""
    size = MESSAGE_OVERHEAD + len(m.content or b"")
    if m.properties:
        size += len(encode_map(m.properties))
    return size


class OpenWireProducers:
    def init_producers(self: OpenWireAdapter) -> None:
        self.windows: dict[ProducerId, int] = {}  # producers with a window (flow control by ProducerAck)

    def on_producer(self: OpenWireAdapter, c: ProducerInfo) -> None:
        if c.window_size > 0 and c.producer_id is not None:
            self.windows[c.producer_id] = c.window_size
        self.respond(c)

    def remove_producer(self: OpenWireAdapter, pid: ProducerId) -> None:
        self.windows.pop(pid, None)

    def on_message(self: OpenWireAdapter, m: OwMessage) -> None:
        if self.leaving(m):  # asked to move (`openwire_cluster`): its transport sends it again there
            return
        dest = m.destination
        if dest is None or not dest.name:
            raise Refused("a message without a destination")
        tx = self.tx_name(m.transaction_id)
        store, user, fault_tolerant = self.broker.store, self.access.user, self.fault_tolerant
        sent = []
        for address, routing in send_targets(dest):
            message = to_message(m, address, store.next_id(), user=user, fault_tolerant=fault_tolerant)
            self.session.send(message, routing, tx)
            sent.append(message)
        durable = m.persistent and tx is None
        if m.response_required:
            if durable:  # (its consumption may confirm it before the sync: `Confirmations`)
                self.session.confirm(self.codec.send(Response(correlation_id=m.command_id)), durable=True,
                                     sent=sent)
            else:
                self.respond(m)
        elif self.windows and m.producer_id in self.windows:
            self.session.confirm(self.codec.send(ProducerAck(producer_id=m.producer_id, size=message_size(m))),
                                 durable=durable, sent=sent if durable else None)
        elif durable:
            self.session.need_sync(sent=sent)
