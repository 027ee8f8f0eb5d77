"""Messages as the broker holds them, independent of the protocol that carried them.

A `Message` is shared by every queue it was routed to; each queue holds its own
`MessageReference` to it (see `queue.py`). Header names that carry broker meaning follow
Artemis so a user of Artemis recognises them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

import msgspec

# Property names with broker meaning (Artemis spelling).
DUPLICATE_ID = "_AMQ_DUPL_ID"
SCHEDULED_DELIVERY_TIME = "_AMQ_SCHED_DELIVERY"  # absolute, epoch ms
SCHEDULED_DELAY = "AMQ_SCHEDULED_DELAY"  # relative, ms (ActiveMQ Classic spelling)
ORIGINAL_ADDRESS = "_AMQ_ORIG_ADDRESS"
ORIGINAL_QUEUE = "_AMQ_ORIG_QUEUE"
ORIGINAL_MESSAGE_ID = "_AMQ_ORIG_MESSAGE_ID"
ACTUAL_EXPIRY_TIME = "_AMQ_ACTUAL_EXPIRY"
GROUP_ID = "JMSXGroupID"


class RoutingType(IntEnum):
    ANYCAST = 0
    MULTICAST = 1

    @classmethod
    def parse(cls, text: str) -> RoutingType:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"routing type must be ANYCAST or MULTICAST, not {text!r}") from None


#: The largest encoding a message keeps in its wire cache (`Message.wire_put`), in bytes.
WIRE_CACHE_LIMIT = 4096


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class LargeBody:
    """A body kept in its own file (`storage/large.py`), not in memory or the journal.

    `name` is the file's name inside the large-message directory (`<message id>.msg` of the
    message that wrote it); `size` is the body's length in bytes.
    """

    name: str
    size: int

    @classmethod
    def for_message(cls, message_id: int, size: int) -> LargeBody:
        return cls(f"{message_id}.msg", size)


@dataclass(slots=True, eq=False)
class Message:
    """One message. `properties` are the application headers, values kept as strings or numbers."""

    id: int
    address: str
    body: bytes
    properties: dict[str, object] = field(default_factory=dict)
    durable: bool = False
    priority: int = 4
    expiration: int = 0  # epoch ms, 0 = never
    timestamp: int = 0  # epoch ms
    scheduled: int = 0  # epoch ms, 0 = deliver now
    routing_type: RoutingType | None = None
    user_id: str | None = None
    # Set for a large message: its body is in a file and `body` is b"".
    large: LargeBody | None = None
    # encodings protocol adapters keep for their next delivery: (key, value, key, value...), see `wire_get`
    wire_cache: tuple | None = None
    # Queues still holding a reference; when it falls to zero the stored message goes.
    ref_count: int = 0
    # Called once every durable queue's reference was acknowledged by a consumer, outside a
    # transaction, if that comes before the send's sync (`petrel.server.confirmations.Confirmations`).
    confirm_hook: Callable[[Message], None] | None = None
    _size: int = 0

    @property
    def size(self) -> int:
        """Approximate bytes held in memory (body, properties, overhead), for memory limits."""
        size = self._size
        if not size:
            size = len(self.body) + 200
            for k, v in self.properties.items():  # (a loop: half the time of sum() over a generator)
                size += len(k) + len(str(v))
            self._size = size
        return size

    @property
    def body_size(self) -> int:
        """The body's length, wherever it is kept."""
        large = self.large
        return len(self.body) if large is None else large.size

    def wire_get(self, key: str) -> object | None:
        """The encoding an adapter cached under `key` (`wire_put`), or None."""
        cache = self.wire_cache
        if cache is not None:
            for i in range(0, len(cache), 2):
                if cache[i] == key:
                    return cache[i + 1]
        return None

    def wire_put(self, key: str, value: object, size: int) -> None:
        """Keep `value`, the message as protocol `key` encodes it (`size` bytes), for the next
        delivery over that protocol: a message delivered to subscribers of several protocols
        (and STOMP versions) is encoded once for each. Allocated on the first put; one entry per
        key, so at most one per protocol and version; an encoding over `WIRE_CACHE_LIMIT` bytes
        is not kept (adapters cache what surrounds a body, never a large body itself)."""
        if size > WIRE_CACHE_LIMIT:
            return
        cache = self.wire_cache
        self.wire_cache = (key, value) if cache is None else cache + (key, value)

    @property
    def duplicate_id(self) -> str | None:
        value = self.properties.get(DUPLICATE_ID)
        return None if value is None else str(value)

    def expired(self, now: int) -> bool:
        return self.expiration != 0 and now >= self.expiration

    def selector_value(self, name: str) -> object | None:
        """Resolve a selector identifier: JMS/AMQ headers first, then properties."""
        header = _HEADERS.get(name)
        if header is not None:
            return header(self)
        return self.properties.get(name)

    def copy_to(self, new_id: int, address: str, extra: dict[str, object]) -> Message:
        """A copy for another address (dead-letter, expiry), keeping origin in properties."""
        props = dict(self.properties)
        props.update(extra)
        return Message(
            id=new_id,
            address=address,
            body=self.body,
            properties=props,
            durable=self.durable,
            priority=self.priority,
            expiration=0,
            timestamp=self.timestamp,
            user_id=self.user_id,
        )


def _delivery_mode(m: Message) -> str:
    return "PERSISTENT" if m.durable else "NON_PERSISTENT"


_HEADERS = {
    "JMSMessageID": lambda m: f"ID:{m.id}",
    "JMSPriority": lambda m: m.priority,
    "AMQPriority": lambda m: m.priority,
    "JMSTimestamp": lambda m: m.timestamp,
    "AMQTimestamp": lambda m: m.timestamp,
    "JMSExpiration": lambda m: m.expiration,
    "AMQExpiration": lambda m: m.expiration,
    "JMSDeliveryMode": _delivery_mode,
    "AMQDurable": lambda m: "DURABLE" if m.durable else "NON_DURABLE",
    "JMSCorrelationID": lambda m: m.properties.get("correlation-id", m.properties.get("JMSCorrelationID")),
    "JMSType": lambda m: m.properties.get("type", m.properties.get("JMSType")),
    "JMSDestination": lambda m: m.address,
    "AMQAddress": lambda m: m.address,
    "AMQSize": lambda m: m.size,
    "AMQUserID": lambda m: m.user_id,
    "AMQGroupID": lambda m: m.properties.get(GROUP_ID),
}


# -- persistence encoding (journal payload); no I/O --------------------------------------

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def encode_message(m: Message) -> bytes:
    fields = (
        m.address,
        m.body,
        m.properties,
        m.durable,
        m.priority,
        m.expiration,
        m.timestamp,
        m.scheduled,
        -1 if m.routing_type is None else int(m.routing_type),
        m.user_id,
    )
    if m.large is not None:  # an eleventh field names the body's file
        fields += ((m.large.name, m.large.size),)
    return _encoder.encode(fields)


_ROUTING_TYPES = tuple(RoutingType)  # by value: a lookup, not an enum call per message


def decode_message(message_id: int, data: bytes) -> Message:
    (address, body, props, durable, priority, expiration, timestamp, scheduled, rt, user_id, *large) = (
        _decoder.decode(data)
    )
    # positional, in the fields' order (recovery builds one per stored message)
    message = Message(message_id, address, body, props, durable, priority, expiration, timestamp, scheduled,
                      None if rt < 0 else _ROUTING_TYPES[rt] if rt < len(_ROUTING_TYPES) else RoutingType(rt),
                      user_id, LargeBody(*large[0]) if large else None)
    message._size = len(data) + 200  # its `size`: the encoding holds the body and the properties
    return message


class MessageHead(msgspec.Struct, array_like=True):
    """Of an encoded message (`encode_message`'s fields in order): what a queue's order needs and
    whether the body is in a file; the rest is skipped (`Raw`), not decoded."""

    address: msgspec.Raw
    body: msgspec.Raw
    properties: msgspec.Raw
    durable: msgspec.Raw
    priority: int
    expiration: msgspec.Raw
    timestamp: msgspec.Raw
    scheduled: int
    routing_type: msgspec.Raw = msgspec.Raw(b"")
    user_id: msgspec.Raw = msgspec.Raw(b"")
    large: tuple | None = None  # (file name, size): the body is in a file (`LargeBody`)


#: `MessageHead` of an encoded message: about a quarter of `decode_message`'s time
peek_message = msgspec.msgpack.Decoder(MessageHead).decode
