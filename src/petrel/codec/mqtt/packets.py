"""MQTT control packets as events: one frozen dataclass per packet type.

`properties` (MQTT 5.0 only; empty in 3.1.1) maps a `PropertyId` to its value: an int, a str
or bytes, except USER_PROPERTY (a list of (name, value) pairs, in order) and
SUBSCRIPTION_IDENTIFIER (a list of ints). The codec keeps and checks them; their meaning is
the server's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .codes import PacketType, ReasonCode

__all__ = [
    "NEED_DATA", "Properties", "Will", "Connect", "Connack", "Publish", "Puback", "Pubrec", "Pubrel",
    "Pubcomp", "Subscription", "Subscribe", "Suback", "Unsubscribe", "Unsuback", "Pingreq", "Pingresp",
    "Disconnect", "Auth", "Packet", "ACKS",
]

Properties = dict


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


#: `next_event()` returns this when no whole packet is buffered.
NEED_DATA = _NeedData()


@dataclass(frozen=True, slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Connect:
    client_id: str
    level: int = 4  # 3 (3.1, "MQIsdp"), 4 (3.1.1) or 5 (5.0)
    clean_start: bool = True  # 3.1.1: clean session
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = field(default_factory=dict)
    type = PacketType.CONNECT


@dataclass(frozen=True, slots=True)
class Connack:
    reason: int = 0  # 5.0: a ReasonCode; 3.1.1: a ConnackCode
    session_present: bool = False
    properties: Properties = field(default_factory=dict)
    type = PacketType.CONNACK


@dataclass(frozen=True, slots=True)
class Publish:
    topic: str  # may be "" in 5.0 when a topic alias names it
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None  # present exactly when qos > 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBLISH


@dataclass(slots=True)
class _PublishUnfrozen:
    """`Publish`'s layout without the freezing, for `publish`: a frozen dataclass's constructor
    sets each field through ``object.__setattr__``, four times the cost of a plain one."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int | None
    properties: Properties


assert _PublishUnfrozen.__slots__ == Publish.__slots__  # (the same layout: `publish` relies on it)


def publish(topic: str, payload: bytes, qos: int, retain: bool, dup: bool, packet_id: int | None,
            properties: Properties) -> Publish:
    """``Publish(topic, payload, qos, retain, dup, packet_id, properties)``, made at a quarter of
    the cost (one per message received): built unfrozen, then made a `Publish` (same slots)."""
    packet = _PublishUnfrozen(topic, payload, qos, retain, dup, packet_id, properties)
    packet.__class__ = Publish
    return packet  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Puback:
    packet_id: int
    reason: int = ReasonCode.SUCCESS
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBACK


@dataclass(frozen=True, slots=True)
class Pubrec:
    packet_id: int
    reason: int = ReasonCode.SUCCESS
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBREC


@dataclass(frozen=True, slots=True)
class Pubrel:
    packet_id: int
    reason: int = ReasonCode.SUCCESS
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBREL


@dataclass(frozen=True, slots=True)
class Pubcomp:
    packet_id: int
    reason: int = ReasonCode.SUCCESS
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBCOMP


#: The four acknowledgements that share one layout (packet id, reason, properties).
ACKS = {PacketType.PUBACK: Puback, PacketType.PUBREC: Pubrec, PacketType.PUBREL: Pubrel,
        PacketType.PUBCOMP: Pubcomp}


@dataclass(slots=True)
class _AckUnfrozen:
    """The acknowledgements' layout without the freezing, for `plain_ack` (as `_PublishUnfrozen`)."""

    packet_id: int
    reason: int
    properties: Properties


assert all(_AckUnfrozen.__slots__ == ack.__slots__ for ack in ACKS.values())


def plain_ack(cls: type, packet_id: int):
    """``cls(packet_id)`` for one of `ACKS` (reason SUCCESS, no properties), at half the cost
    (one per QoS 1 or 2 message acknowledged): built unfrozen, then made a `cls` (same slots)."""
    packet = _AckUnfrozen(packet_id, ReasonCode.SUCCESS, {})
    packet.__class__ = cls
    return packet


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (the last three are 5.0's)."""

    filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0  # 0: send retained on subscribe; 1: only if new; 2: never


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = field(default_factory=dict)
    type = PacketType.SUBSCRIBE


@dataclass(frozen=True, slots=True)
class Suback:
    packet_id: int
    reasons: tuple[int, ...]  # one per filter: the granted QoS, or a failure (0x80 and above)
    properties: Properties = field(default_factory=dict)
    type = PacketType.SUBACK


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_id: int
    filters: tuple[str, ...]
    properties: Properties = field(default_factory=dict)
    type = PacketType.UNSUBSCRIBE


@dataclass(frozen=True, slots=True)
class Unsuback:
    packet_id: int
    reasons: tuple[int, ...] = ()  # 5.0 only
    properties: Properties = field(default_factory=dict)
    type = PacketType.UNSUBACK


@dataclass(frozen=True, slots=True)
class Pingreq:
    type = PacketType.PINGREQ


@dataclass(frozen=True, slots=True)
class Pingresp:
    type = PacketType.PINGRESP


@dataclass(frozen=True, slots=True)
class Disconnect:
    reason: int = ReasonCode.SUCCESS  # 5.0 only
    properties: Properties = field(default_factory=dict)
    type = PacketType.DISCONNECT


@dataclass(frozen=True, slots=True)
class Auth:
    reason: int = ReasonCode.SUCCESS
    properties: Properties = field(default_factory=dict)
    type = PacketType.AUTH


Packet = (Connect | Connack | Publish | Puback | Pubrec | Pubrel | Pubcomp | Subscribe | Suback | Unsubscribe
          | Unsuback | Pingreq | Pingresp | Disconnect | Auth)
