"""A packet event -> its bytes, for protocol level `level` (4: 3.1.1, 5: 5.0; 3 as 4).

Properties are written only at level 5; a 5.0 reason code that is SUCCESS with no properties
is left out where the specification allows it (PUBACK and friends, DISCONNECT).
"""

from __future__ import annotations

import struct

from .codes import PROTOCOL_LEVELS, PacketType
from .decode import FIXED_FLAGS
from .errors import MqttLocalError
from .packets import (
    ACKS,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Publish,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from .wire import encode_bin, encode_properties, encode_str, encode_varint

__all__ = ["encode_packet", "publish_parts", "publish_head", "ack_bytes"]

_U16 = struct.Struct(">H")
_EMPTY_PROPS = b"\x00"
PUBLISH_FIRST = PacketType.PUBLISH << 4
_ACK_HEADS = {int(t): bytes((t << 4 | FIXED_FLAGS[t], 2)) for t in ACKS}


def _frame(ptype: int, flags: int, body: bytes) -> bytes:
    return bytes((ptype << 4 | flags,)) + encode_varint(len(body)) + body


def publish_parts(p: Publish, level: int) -> tuple[bytes, bytes]:
    """(fixed header + variable header, payload): a caller may put them together itself."""
    if p.qos not in (0, 1, 2):
        raise MqttLocalError(f"PUBLISH with QoS {p.qos}")
    if (p.packet_id is not None) != (p.qos > 0):
        raise MqttLocalError("a PUBLISH has a packet id exactly when its QoS is above 0")
    var = encode_str(p.topic)
    if p.qos:
        var += _U16.pack(p.packet_id)
    if level >= 5:
        var += encode_properties(p.properties) if p.properties else _EMPTY_PROPS
    flags = (8 if p.dup else 0) | p.qos << 1 | (1 if p.retain else 0)
    return (bytes((PacketType.PUBLISH << 4 | flags,)) + encode_varint(len(var) + len(p.payload)) + var,
            p.payload)


def publish_head(topic: bytes, payload_size: int, qos: int, packet_id: int | None, retain: bool, dup: bool,
                 v5: bool) -> bytes:
    """The fixed and variable header of a PUBLISH without properties, its topic given encoded
    (`encode_str`): what `publish_parts` gives for such a packet, without a `Publish` event (a
    server's deliveries, one per message, with the topic encoded once per address)."""
    size = len(topic) + payload_size
    if qos:
        size += 2
    if v5:
        size += 1
    first = PUBLISH_FIRST | (8 if dup and qos else 0) | qos << 1 | (1 if retain else 0)
    head = bytes((first, size)) if size < 0x80 else bytes((first,)) + encode_varint(size)
    if qos:
        return head + topic + _U16.pack(packet_id) + (_EMPTY_PROPS if v5 else b"")
    return head + topic + _EMPTY_PROPS if v5 else head + topic


def ack_bytes(ptype: int, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBREL or PUBCOMP with reason SUCCESS and no properties: the same bytes
    in 3.1.1 and 5.0 (5.0 leaves out a success reason code without properties)."""
    return _ACK_HEADS[ptype] + _U16.pack(packet_id)


def encode_packet(packet: Packet, level: int) -> bytes:
    v5 = level >= 5
    ptype = packet.type
    if isinstance(packet, Publish):
        head, payload = publish_parts(packet, level)
        return head + payload
    if ptype in ACKS:
        body = _U16.pack(packet.packet_id)
        if v5 and (packet.reason or packet.properties):
            body += bytes((packet.reason,))
            if packet.properties:
                body += encode_properties(packet.properties)
        return _frame(ptype, FIXED_FLAGS[ptype], body)
    if isinstance(packet, Connack):
        body = bytes((1 if packet.session_present else 0, packet.reason))
        if v5:
            body += encode_properties(packet.properties)
        return _frame(ptype, 0, body)
    if isinstance(packet, Subscribe):
        body = _U16.pack(packet.packet_id)
        if v5:
            body += encode_properties(packet.properties)
        for s in packet.subscriptions:
            options = s.qos
            if v5:
                options |= (4 if s.no_local else 0) | (8 if s.retain_as_published else 0) | s.retain_handling << 4
            body += encode_str(s.filter) + bytes((options,))
        return _frame(ptype, 2, body)
    if isinstance(packet, Suback):
        body = _U16.pack(packet.packet_id)
        if v5:
            body += encode_properties(packet.properties)
        return _frame(ptype, 0, body + bytes(packet.reasons))
    if isinstance(packet, Unsubscribe):
        body = _U16.pack(packet.packet_id)
        if v5:
            body += encode_properties(packet.properties)
        for f in packet.filters:
            body += encode_str(f)
        return _frame(ptype, 2, body)
    if isinstance(packet, Unsuback):
        body = _U16.pack(packet.packet_id)
        if v5:
            body += encode_properties(packet.properties) + bytes(packet.reasons)
        return _frame(ptype, 0, body)
    if isinstance(packet, (Disconnect, Auth)):
        if not v5:
            if isinstance(packet, Auth):
                raise MqttLocalError("AUTH is a 5.0 packet")
            return _frame(ptype, 0, b"")
        if not packet.reason and not packet.properties and isinstance(packet, Disconnect):
            return _frame(ptype, 0, b"")
        return _frame(ptype, 0, bytes((packet.reason,)) + encode_properties(packet.properties))
    if isinstance(packet, Connect):
        return _connect(packet)
    return _frame(ptype, 0, b"")  # PINGREQ, PINGRESP


def _connect(c: Connect) -> bytes:
    name = PROTOCOL_LEVELS.get(c.level)
    if name is None:
        raise MqttLocalError(f"protocol level {c.level}")
    v5 = c.level >= 5
    flags = 2 if c.clean_start else 0
    will = c.will
    if will is not None:
        flags |= 4 | will.qos << 3 | (0x20 if will.retain else 0)
    if c.username is not None:
        flags |= 0x80
    if c.password is not None:
        flags |= 0x40
    body = encode_str(name) + bytes((c.level, flags)) + _U16.pack(c.keep_alive)
    if v5:
        body += encode_properties(c.properties)
    body += encode_str(c.client_id)
    if will is not None:
        if v5:
            body += encode_properties(will.properties)
        body += encode_str(will.topic) + encode_bin(will.payload)
    if c.username is not None:
        body += encode_str(c.username)
    if c.password is not None:
        body += encode_bin(c.password)
    return _frame(PacketType.CONNECT, 0, body)
