"""`MqttConnection`: the sans-IO MQTT 3.1, 3.1.1 and 5.0 connection (h11 shape).

    conn = MqttConnection(Role.SERVER, max_packet_size=...)
    conn.receive_data(data)
    while (event := conn.next_event()) is not NEED_DATA: ...
    wire = conn.send(packet)

The server learns the protocol level from the client's CONNECT. Each direction obeys the
table in `state.py` (CONNECT first and once; each side sends only its own packet types). A
packet whose remaining length would make it larger than `max_packet_size` is refused as soon
as its fixed header is read (PACKET_TOO_LARGE), before its bytes are held. After a protocol
error the connection is broken: every later `next_event` raises it again.
"""

from __future__ import annotations

import struct

from petrel.codec.buffer import Buffer
from petrel.codec.roles import Role

from .codes import PacketType, ReasonCode
from .decode import decode_packet
from .encode import ack_bytes, encode_packet, publish_head, publish_parts
from .errors import MqttLocalError, MqttProtocolError
from .packets import ACKS, NEED_DATA, Connect, Packet, Publish
from .state import may_receive, may_send, receivable_when_open
from .wire import MAX_VARINT, decode_varint_prefix

__all__ = ["MqttConnection", "detect", "DEFAULT_MAX_PACKET_SIZE"]

DEFAULT_MAX_PACKET_SIZE = 16 * 1024 * 1024
_ACK_TYPES = frozenset(int(t) for t in ACKS)


class MqttConnection:
    def __init__(self, role: Role = Role.SERVER, *, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
                 level: int | None = None) -> None:
        self.role = role
        self.max_packet_size = max(2, min(max_packet_size, MAX_VARINT + 5))
        #: protocol level: 3 (3.1), 4 (3.1.1), 5 (5.0); None until CONNECT passes
        self.level = level
        self.connected_in = False  # CONNECT (server) or CONNACK (client) received
        self.connected_out = False  # CONNECT or CONNACK sent
        self._buffer = Buffer()
        self._open_types: frozenset[int] = frozenset()  # packet types received without a state check
        self._error: MqttProtocolError | None = None

    @property
    def v5(self) -> bool:
        return (self.level or 4) >= 5

    # -- input -----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        self._buffer.feed(data)

    def next_event(self) -> Packet | object:
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except MqttProtocolError as exc:
            self._error = exc
            self._buffer.clear()
            raise

    def _next(self) -> Packet | object:
        buf = self._buffer
        data, pos = buf.data, buf.pos
        size = len(data)
        if size - pos < 2:
            return NEED_DATA
        length = data[pos + 1]
        if length < 0x80:  # a remaining length of one byte: most packets
            used = 1
        else:
            got = decode_varint_prefix(data, pos + 1)
            if got is None:
                return NEED_DATA
            length, used = got
        total = 1 + used + length
        if total > self.max_packet_size:
            raise MqttProtocolError(f"a packet of {total} bytes, over the maximum packet size "
                                    f"{self.max_packet_size}", ReasonCode.PACKET_TOO_LARGE)
        if size - pos < total:
            return NEED_DATA
        first = data[pos]
        body = bytes(data[pos + 1 + used:pos + total])
        buf.consume_to(pos + total)
        if self.connected_in and (first >> 4) in self._open_types:  # the common case: no state change
            return decode_packet(first, body, self.level or 4)
        if first >> 4 == PacketType.CONNECT and self.role is Role.SERVER and not self.connected_in:
            packet = decode_packet(first, body, 4)
            self.level = packet.level
        else:
            packet = decode_packet(first, body, self.level or 4)
        problem = may_receive(self.role, self.connected_in, packet.type, self.v5)
        if problem is not None:
            raise MqttProtocolError(problem, ReasonCode.PROTOCOL_ERROR)
        if packet.type in (PacketType.CONNECT, PacketType.CONNACK):
            self.connected_in = True
            self._open_types = receivable_when_open(self.role, self.v5)
        return packet

    @property
    def buffered_bytes(self) -> int:
        """Received bytes not yet returned as events (the unfinished packet)."""
        return len(self._buffer)

    @property
    def trailing(self) -> bytes:
        """Bytes received and not yet part of an event."""
        return self._buffer.peek()

    # -- output ----------------------------------------------------------------------------

    def send(self, packet: Packet) -> bytes:
        problem = may_send(self.role, self.connected_out, packet.type, self.v5)
        if problem is not None:
            raise MqttLocalError(problem)
        if isinstance(packet, Connect):
            self.level = packet.level
        try:
            data = encode_packet(packet, self.level or 4)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise MqttLocalError(f"cannot encode {packet.type.name}: {exc}") from None
        if packet.type in (PacketType.CONNECT, PacketType.CONNACK):
            self.connected_out = True
        return data

    def ack(self, ptype: PacketType, packet_id: int) -> bytes:
        """`send` of a PUBACK, PUBREC, PUBREL or PUBCOMP with reason SUCCESS and no properties,
        without building the event (one per QoS 1 or 2 message)."""
        if not self.connected_out or not 0 < packet_id <= 0xFFFF or ptype not in _ACK_TYPES:
            return self.send(ACKS[ptype](packet_id))  # (refused or checked there)
        return ack_bytes(ptype, packet_id)

    def publish_head(self, topic: bytes, payload_size: int, qos: int, packet_id: int | None, *,
                     retain: bool = False, dup: bool = False) -> bytes:
        """The header of a PUBLISH without properties whose topic is given encoded (`encode_str`),
        to write before its payload: `publish_parts` without building the event."""
        if not self.connected_out or qos not in (0, 1, 2) or (packet_id is not None) != (qos > 0):
            raise MqttLocalError("cannot encode PUBLISH: not connected, or QoS and packet id disagree")
        try:
            return publish_head(topic, payload_size, qos, packet_id, retain, dup, (self.level or 4) >= 5)
        except (ValueError, OverflowError, struct.error) as exc:
            raise MqttLocalError(f"cannot encode PUBLISH: {exc}") from None

    def publish_parts(self, packet: Publish) -> tuple[bytes, bytes]:
        """A PUBLISH as (header, payload), to write the payload without copying it."""
        if not self.connected_out:  # (once open, a PUBLISH is always allowed)
            problem = may_send(self.role, self.connected_out, PacketType.PUBLISH, self.v5)
            if problem is not None:
                raise MqttLocalError(problem)
        try:
            return publish_parts(packet, self.level or 4)
        except (ValueError, KeyError, TypeError, OverflowError, AttributeError) as exc:
            raise MqttLocalError(f"cannot encode PUBLISH: {exc}") from None


def detect(head: bytes) -> bool | None:
    """Whether a client's first bytes are an MQTT CONNECT (protocol name "MQTT", or "MQIsdp" for
    3.1, whatever the level: a level not spoken here is answered with CONNACK's "unacceptable
    protocol version"): True, False, or None (too few to tell)."""
    if not head:
        return None
    if head[0] != 0x10:
        return False
    try:
        got = decode_varint_prefix(head, 1)
    except MqttProtocolError:
        return False
    if got is None:
        return None
    _, used = got
    rest = head[1 + used:]
    undecided = False
    for expected in (b"\x00\x04MQTT", b"\x00\x06MQIsdp"):
        n = min(len(rest), len(expected))
        if rest[:n] != expected[:n]:
            continue
        if n < len(expected):
            undecided = True
            continue
        return True
    return None if undecided else False
