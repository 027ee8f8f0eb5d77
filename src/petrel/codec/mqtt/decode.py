"""Bytes of one whole packet -> a packet event (the fixed header already read).

`level` is the connection's protocol level (4 for 3.1.1, 5 for 5.0; 3 reads as 4); a CONNECT
carries its own. Every rule of the specification that concerns one packet's bytes is checked
here: fixed-header flags, QoS 3, packet id 0, reserved bits, empty SUBSCRIBE lists, strings.
"""

from __future__ import annotations

from .codes import PROTOCOL_LEVELS, PacketType, ReasonCode
from .errors import MqttProtocolError
from .packets import (
    ACKS,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Publish,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    plain_ack,
    publish,
)
from .wire import Reader, malformed

__all__ = ["decode_packet", "FIXED_FLAGS"]

#: The flags each packet type's fixed header must carry (PUBLISH's are its own).
FIXED_FLAGS = {t: 0 for t in PacketType}
FIXED_FLAGS.update({PacketType.PUBREL: 2, PacketType.SUBSCRIBE: 2, PacketType.UNSUBSCRIBE: 2})
#: first byte -> event, of a PUBACK, PUBREC, PUBREL or PUBCOMP with the right flags (one per QoS 1/2 message)
_PLAIN_ACKS = {t << 4 | FIXED_FLAGS[t]: event for t, event in ACKS.items()}


def decode_packet(first: int, body: bytes, level: int) -> Packet:
    if first >> 4 == 3:  # PUBLISH, the hot path
        return _publish(first & 0x0F, body, level >= 5)
    ack = _PLAIN_ACKS.get(first)
    if ack is not None and len(body) == 2 and (body[0] or body[1]):  # an ack with its packet id alone
        return plain_ack(ack, body[0] << 8 | body[1])
    try:
        ptype = PacketType(first >> 4)
    except ValueError:
        raise malformed("packet type 0 is reserved") from None
    flags = first & 0x0F
    if flags != FIXED_FLAGS[ptype]:
        raise malformed(f"{ptype.name} with fixed-header flags {flags:#x}")
    v5 = level >= 5
    r = Reader(body)
    if ptype in ACKS:
        packet = _ack(r, ptype, v5)
    elif ptype == PacketType.CONNECT:
        packet: Packet = _connect(r)
    elif ptype == PacketType.CONNACK:
        packet = _connack(r, v5)
    elif ptype == PacketType.SUBSCRIBE:
        packet = _subscribe(r, v5)
    elif ptype == PacketType.SUBACK:
        pid = _packet_id(r)
        props = r.properties() if v5 else {}
        packet = Suback(pid, tuple(r.rest()), props)
    elif ptype == PacketType.UNSUBSCRIBE:
        pid = _packet_id(r)
        props = r.properties() if v5 else {}
        filters = []
        while r.left:
            filters.append(r.str())
        if not filters:
            raise MqttProtocolError("UNSUBSCRIBE without a topic filter", ReasonCode.PROTOCOL_ERROR)
        packet = Unsubscribe(pid, tuple(filters), props)
    elif ptype == PacketType.UNSUBACK:
        pid = _packet_id(r)
        if v5:
            props = r.properties()
            packet = Unsuback(pid, tuple(r.rest()), props)
        else:
            packet = Unsuback(pid)
    elif ptype == PacketType.PINGREQ:
        packet = Pingreq()
    elif ptype == PacketType.PINGRESP:
        packet = Pingresp()
    elif ptype == PacketType.DISCONNECT:
        if v5 and r.left:
            reason = r.u8()
            packet = Disconnect(reason, r.properties() if r.left else {})
        else:
            packet = Disconnect()
    else:  # AUTH
        if not v5:
            raise MqttProtocolError("AUTH is a 5.0 packet", ReasonCode.PROTOCOL_ERROR)
        if r.left:
            reason = r.u8()
            packet = Auth(reason, r.properties() if r.left else {})
        else:
            packet = Auth()
    if r.left:
        raise malformed(f"{ptype.name} has {r.left} bytes after its last field")
    return packet


def _packet_id(r: Reader) -> int:
    pid = r.u16()
    if pid == 0:
        raise MqttProtocolError("packet identifier 0", ReasonCode.PROTOCOL_ERROR)
    return pid


def _publish(flags: int, body: bytes, v5: bool) -> Publish:
    qos = (flags >> 1) & 3
    if qos == 3:
        raise malformed("PUBLISH with QoS 3")
    dup = bool(flags & 8)
    if dup and qos == 0:
        raise malformed("PUBLISH with DUP set at QoS 0")
    n = len(body)
    if n < 2:
        raise malformed("the packet ends inside a field")
    end = 2 + (body[0] << 8 | body[1])
    if end > n:
        raise malformed("the packet ends inside a field")
    try:
        topic = body[2:end].decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("a string that is not well-formed UTF-8") from None
    if "\x00" in topic:
        raise malformed("a string holding U+0000")
    pid = None
    if qos:
        if end + 2 > n:
            raise malformed("the packet ends inside a field")
        pid = body[end] << 8 | body[end + 1]
        if pid == 0:
            raise MqttProtocolError("packet identifier 0", ReasonCode.PROTOCOL_ERROR)
        end += 2
    props: dict = {}
    if v5:
        if end < n and body[end] == 0:  # no properties: the usual case
            end += 1
        else:
            r = Reader(body, end)
            props = r.properties()
            end = r.pos
    return publish(topic, body[end:], qos, bool(flags & 1), dup, pid, props)


def _ack(r: Reader, ptype: PacketType, v5: bool):
    pid = _packet_id(r)
    reason, props = 0, {}
    if v5 and r.left:
        reason = r.u8()
        if r.left:
            props = r.properties()
    return ACKS[ptype](pid, reason, props)


def _connect(r: Reader) -> Connect:
    name = r.str()
    level = r.u8()
    if PROTOCOL_LEVELS.get(level) != name:
        if name not in ("MQTT", "MQIsdp"):
            raise MqttProtocolError(f"protocol name {name!r} is not MQTT", ReasonCode.PROTOCOL_ERROR)
        raise MqttProtocolError(f"protocol {name} level {level} is not spoken here (3.1, 3.1.1 and 5.0 are)",
                                ReasonCode.UNSUPPORTED_PROTOCOL_VERSION)
    flags = r.u8()
    if flags & 1:
        raise malformed("CONNECT's reserved flag is set")
    keep_alive = r.u16()
    v5 = level >= 5
    props = r.properties() if v5 else {}
    client_id = r.str()
    will = None
    will_qos = (flags >> 3) & 3
    if flags & 4:
        if will_qos == 3:
            raise malformed("a will with QoS 3")
        will_props = r.properties() if v5 else {}
        topic = r.str()
        payload = r.bin()
        will = Will(topic, payload, will_qos, bool(flags & 0x20), will_props)
    elif will_qos or flags & 0x20:
        raise malformed("will QoS or will retain set without a will")
    username = r.str() if flags & 0x80 else None
    if flags & 0x40:
        if not v5 and username is None and level == 4:
            raise malformed("a password without a user name (3.1.1)")
        password = r.bin()
    else:
        password = None
    return Connect(client_id, level, bool(flags & 2), keep_alive, username, password, will, props)


def _connack(r: Reader, v5: bool) -> Connack:
    flags = r.u8()
    if flags & 0xFE:
        raise malformed("CONNACK's reserved flags are set")
    reason = r.u8()
    props = r.properties() if v5 and r.left else {}
    return Connack(reason, bool(flags & 1), props)


def _subscribe(r: Reader, v5: bool) -> Subscribe:
    pid = _packet_id(r)
    props = r.properties() if v5 else {}
    subs = []
    while r.left:
        topic = r.str()
        options = r.u8()
        qos = options & 3
        if qos == 3:
            raise malformed("a subscription with QoS 3")
        if v5:
            if options & 0xC0:
                raise malformed("a subscription's reserved option bits are set")
            handling = (options >> 4) & 3
            if handling == 3:
                raise malformed("retain handling 3")
            subs.append(Subscription(topic, qos, bool(options & 4), bool(options & 8), handling))
        else:
            if options & 0xFC:
                raise malformed("a subscription's reserved bits are set")
            subs.append(Subscription(topic, qos))
    if not subs:
        raise MqttProtocolError("SUBSCRIBE without a topic filter", ReasonCode.PROTOCOL_ERROR)
    return Subscribe(pid, tuple(subs), props)
