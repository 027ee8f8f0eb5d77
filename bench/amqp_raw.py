"""A raw-socket AMQP 1.0 producer and consumer for bench/amqp.py (`--generator raw`), cheaper per
message than proton's Python handlers.

Petrel's sans-IO codec (codec/amqp) does the handshake (SASL ANONYMOUS, open, begin, attach) and
decodes every frame but transfers; the producer writes transfer frames from a template (only the
delivery id and tag change: fixed-width uint and 4-byte binary), the consumer counts transfer
frames by their descriptor without decoding them (one link per session, so delivery ids follow
one another from the first). Credit and the session window are respected both ways: the producer
sends only within the broker's link credit and incoming window; the consumer grants 1,000 credits
and tops them up at half, and, at-least-once, accepts and settles with one disposition per read
(a range first..last).
"""

from __future__ import annotations

import socket
import struct
import time

from petrel.codec.amqp import AMQP, NEED_DATA, SASL, AmqpConnection, Frame, ProtocolHeader
from petrel.codec.amqp.composite import from_described
from petrel.codec.amqp.message import AmqpMessage, encode_message
from petrel.codec.amqp.performatives import (
    RCV_FIRST, ROLE_RECEIVER, ROLE_SENDER, SND_SETTLED, SND_UNSETTLED, Accepted, Attach, Begin, Close,
    Detach, Disposition, Flow, Header, Open, SaslInit, SaslMechanisms, SaslOutcome, Source, Target,
    Transfer,
)
from petrel.codec.roles import Role
from petrel.codec.amqp.types import decode_one

WINDOW = 1000
BIG = 0x7FFFFFFF
HDR = struct.Struct(">IBBH")
TRANSFER = b"\x00\x53\x14"


class RawLink:
    def __init__(self, port: int, name: str, address: str, receiver: bool, settled: bool) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = self.codec = AmqpConnection(Role.CLIENT)
        self.sock.sendall(c.send_header(SASL) + c.send(0, SaslInit(mechanism="ANONYMOUS", initial_response=b"")))
        self._expect(ProtocolHeader)
        self._expect(SaslMechanisms)
        outcome = self._expect(SaslOutcome)
        if outcome.code != 0:
            raise ConnectionError(f"SASL outcome {outcome.code}")
        self.sock.sendall(c.send_header(AMQP) + c.send(0, Open(container_id=name, max_frame_size=1 << 20))
                          + c.send(0, Begin(next_outgoing_id=0, incoming_window=BIG, outgoing_window=BIG)))
        self._expect(ProtocolHeader)
        self._expect(Open)
        begin = self._expect(Begin)
        self.next_incoming_id = begin.next_outgoing_id
        self.remote_window = (0, begin.incoming_window)  # (their next_incoming_id, window) as last told
        self.credit = (0, 0)  # (their delivery_count, link_credit) as last told
        mode = SND_SETTLED if settled else SND_UNSETTLED
        attach = Attach(name=name, handle=0, role=ROLE_RECEIVER if receiver else ROLE_SENDER,
                        snd_settle_mode=mode, rcv_settle_mode=RCV_FIRST,
                        source=Source(address=address) if receiver else Source(),
                        target=Target() if receiver else Target(address=address),
                        initial_delivery_count=None if receiver else 0)
        self.sock.sendall(c.send(0, attach))
        theirs = self._expect(Attach)
        if (theirs.target if not receiver else theirs.source) is None:
            raise ConnectionError(f"link to {address} refused")
        while (event := c.next_event()) is not NEED_DATA:  # frames read with the attach
            if isinstance(event, Frame) and isinstance(event.performative, Flow):
                self._flow(event.performative)
        self.buf = bytearray(c._buf.peek())  # what is left: part of a frame; from here on we frame
        c._buf.clear()

    def _expect(self, kind):
        while True:
            event = self.codec.next_event()
            if event is NEED_DATA:
                self.sock.settimeout(60)
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed by the broker")
                self.codec.receive_data(data)
                continue
            p = event.performative if isinstance(event, Frame) else event
            if isinstance(p, Flow):
                self._flow(p)
                continue
            if isinstance(p, (Detach, Close)):
                raise ConnectionError(f"broker sent {p}")
            if isinstance(p, kind):
                return p

    def _flow(self, f: Flow) -> None:
        self.remote_window = (f.next_incoming_id or 0, f.incoming_window)
        if f.handle is not None and f.link_credit is not None:
            self.credit = (f.delivery_count or 0, f.link_credit)

    def frames(self, timeout: float = 60.0):
        """Frame bodies (performative onwards) of the whole frames read so far (one recv)."""
        buf = self.buf
        if not self._whole():
            self.sock.settimeout(timeout)
            data = self.sock.recv(262144)
            if not data:
                raise ConnectionError("closed by the broker")
            buf += data
        pos, out = 0, []
        while len(buf) - pos >= 8:
            size, doff = HDR.unpack_from(buf, pos)[:2]
            if len(buf) - pos < size:
                break
            out.append(bytes(buf[pos + doff * 4:pos + size]))
            pos += size
        del buf[:pos]
        return out

    def _whole(self) -> bool:
        buf = self.buf
        return len(buf) >= 8 and len(buf) >= HDR.unpack_from(buf, 0)[0]

    @staticmethod
    def decode(body: bytes):
        return from_described(decode_one(body, 0)[0]) if body else None

    def close(self) -> None:
        """Close, then read until the broker's close or EOF: a socket closed with unread bytes
        resets the connection, and a broker may then drop the transfers it had not read yet."""
        try:
            self.sock.sendall(self.codec.send(0, Close()))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                frames = self.frames(timeout=max(0.1, deadline - time.monotonic()))
                if any(body.startswith(b"\x00\x53\x18") for body in frames):
                    break
        except (OSError, ConnectionError):
            pass
        self.sock.close()


def consume_raw(port: int, address: str, durable: bool, count: int, ready=None) -> tuple[int, float]:
    link = RawLink(port, f"bench-consumer-{address}", address, True, not durable)
    c = link.codec
    got = granted = 0

    def grant() -> bytes:
        nonlocal granted
        granted = got + WINDOW
        return c.send(0, Flow(next_incoming_id=link.next_incoming_id + got, incoming_window=BIG,
                              next_outgoing_id=0, outgoing_window=BIG, handle=0, delivery_count=got,
                              link_credit=WINDOW))

    link.sock.sendall(grant())
    if ready is not None:
        ready.set()
    first_id = None
    last = 0.0
    while got < count:
        frames = link.frames()
        before = got
        for body in frames:
            if body.startswith(TRANSFER):
                if first_id is None:
                    first_id = link.decode(body).delivery_id if durable else 0
                got += 1
            elif body:
                p = link.decode(body)
                if isinstance(p, (Detach, Close)):
                    raise ConnectionError(f"broker sent {p}")
        if got > before:
            last = time.perf_counter()
            out = []
            if durable:
                out.append(c.send(0, Disposition(role=ROLE_RECEIVER, first=first_id + before,
                                                 last=first_id + got - 1, settled=True, state=Accepted())))
            if granted - got < WINDOW // 2 and got < count:
                out.append(grant())
            if out:
                link.sock.sendall(b"".join(out))
    link.close()
    return got, last


def produce_raw(port: int, address: str, durable: bool, count: int, size: int) -> tuple[float, int]:
    """(time of the first send, messages sent (pre-settled) or accepted (at-least-once))."""
    link = RawLink(port, f"bench-producer-{address}", address, False, not durable)
    payload = encode_message(AmqpMessage.with_data(b"x" * size, header=Header(durable=durable)))
    # transfer: handle uint0, delivery-id uint (4 bytes), tag binary8 of 4, message-format uint0, settled
    body_len = 3 + 3 + 1 + 5 + 6 + 1 + 1
    head = HDR.pack(8 + body_len + len(payload), 2, 0, 0) + TRANSFER + bytes((0xc0, 15, 5)) + b"\x43\x70"
    mid, tail = b"\xa0\x04", b"\x43" + (b"\x42" if durable else b"\x41") + payload
    sent = confirmed = 0
    t0 = 0.0
    while confirmed < count:
        their_count, credit = link.credit
        their_next, window = link.remote_window
        room = min(their_count + credit - sent, their_next + window - sent, count - sent)
        if durable:
            room = min(room, WINDOW - (sent - confirmed))
        if room > 0:
            if not t0:
                t0 = time.perf_counter()
            frames = []
            for i in range(sent, sent + room):
                b = i.to_bytes(4, "big")
                frames.append(head + b + mid + b + tail)
            link.sock.sendall(b"".join(frames))
            sent += room
            if not durable:
                confirmed = sent
                continue
        for body in link.frames():
            if body.startswith(TRANSFER) or not body:
                continue
            p = link.decode(body)
            if isinstance(p, Flow):
                link._flow(p)
            elif isinstance(p, Disposition) and p.role == ROLE_RECEIVER and isinstance(p.state, Accepted):
                confirmed += (p.last if p.last is not None else p.first) - p.first + 1
            elif isinstance(p, Disposition):
                raise ConnectionError(f"not accepted: {p}")
            elif isinstance(p, (Detach, Close)):
                raise ConnectionError(f"broker sent {p}")
    link.close()
    return t0, confirmed
