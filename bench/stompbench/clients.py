"""Pipelined raw-socket STOMP clients: one producer or consumer per connection.

Producers write frames in batches without waiting for anything but the socket
(and, with a receipt window, for room in the window).  Consumers read large
chunks and scan them with :func:`frames.scan`.  Every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import time
from array import array
from dataclasses import dataclass

from .dialect import Dialect
from .frames import BrokerError, Scan, ack_id, read_frame_command, render, scan, send_template
from .workloads import ConsumerSpec, ProducerSpec

READ_SIZE = 1 << 18
BATCH = 64  # frames per write for unpaced producers
PACE_TICK = 0.001  # seconds: a paced producer sends what is due on this grid

now_ns = time.monotonic_ns  # CLOCK_MONOTONIC: one clock for every process on the host


@dataclass
class ClientResult:
    """What one connection did; plain data so it pickles back from a worker process."""

    role: str
    destination: str
    sent: int = 0
    receipts: int = 0
    received: int = 0
    start_ns: int = 0
    subscribe_ns: int = 0
    first_send_ns: int = 0
    last_send_ns: int = 0
    last_receipt_ns: int = 0
    first_recv_ns: int = 0
    last_recv_ns: int = 0
    latencies: bytes = b""  # array('q') of nanoseconds
    error: str | None = None


@functools.lru_cache(maxsize=None)
def tls_context(ca: str) -> ssl.SSLContext:
    """A client context trusting the PEM CAs in ``ca`` (one per process and CA file)."""
    return ssl.create_default_context(cafile=ca)


async def open_stomp(
    host: str, port: int, dialect: Dialect, timeout: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """Connect (over TLS with ``dialect.tls_ca``), send CONNECT, wait for CONNECTED; return the
    streams and any extra bytes read."""
    tls = tls_context(dialect.tls_ca) if dialect.tls_ca else None
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None), timeout
    )
    set_nodelay(writer.get_extra_info("socket"))
    headers = [("accept-version", "1.2"), ("heart-beat", "0,0"), *dialect.connect_headers]
    writer.write(render("CONNECT", headers))
    buf = b""
    deadline = time.monotonic() + timeout
    while True:
        frame = read_frame_command(buf)
        if frame is not None:
            command, raw, end = frame
            if command == "CONNECTED":
                return reader, writer, buf[end:]
            writer.close()
            raise BrokerError(f"CONNECT answered with {raw[:400].decode('utf-8', 'replace')!r}")
        data = await asyncio.wait_for(reader.read(65536), max(0.001, deadline - time.monotonic()))
        if not data:
            writer.close()
            raise ConnectionError("connection closed before CONNECTED")
        buf += data


def set_nodelay(sock) -> None:
    """No Nagle: a receipt-bound or paced sender must not wait for a delayed ACK."""
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def _close(writer: asyncio.StreamWriter | None) -> None:
    if writer is not None and not writer.is_closing():
        writer.close()


class Producer:
    """Sends ``spec.count`` SEND frames, pipelined, and counts the RECEIPTs."""

    def __init__(self, spec: ProducerSpec, dialect: Dialect, body: bytes) -> None:
        self.spec = spec
        self._dialect = dialect
        destination = dialect.destination(spec.destination)
        extra = list(dialect.persistent_headers) if spec.persistent else []
        self._windowed = spec.window > 0
        self._template = send_template(destination, body, extra, receipt=self._windowed)
        self._last_template = send_template(destination, body, extra, receipt=True)
        self._expected_receipts = spec.count if self._windowed else 1
        self._send_ts = array("q", bytes(8 * (spec.count + 1)))
        self._acked = 0
        self._room = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._buf = b""
        self.result = ClientResult("producer", spec.destination)

    async def connect(self, host: str, port: int, timeout: float) -> None:
        self._reader, self._writer, self._buf = await open_stomp(host, port, self._dialect, timeout)

    async def run(self, deadline_ns: int) -> ClientResult:
        r = self.result
        r.start_ns = now_ns()
        receipts = asyncio.ensure_future(self._read_receipts())
        sender = asyncio.ensure_future(self._send(deadline_ns))
        try:
            timeout = max(0.0, (deadline_ns - now_ns()) / 1e9)
            done, _ = await asyncio.wait(
                {sender, receipts}, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION
            )
            for task in done:
                task.result()  # re-raise a failure
            if len(done) < 2:
                raise TimeoutError(
                    f"producer timed out: sent {r.sent}/{self.spec.count}, "
                    f"receipts {r.receipts}/{self._expected_receipts}"
                )
        except (OSError, BrokerError, TimeoutError, asyncio.IncompleteReadError) as exc:
            r.error = (
                f"{type(exc).__name__}: {exc} (sent {r.sent}/{self.spec.count}, "
                f"receipts {r.receipts}/{self._expected_receipts})"
            )
        finally:
            for task in (sender, receipts):
                task.cancel()
            await asyncio.gather(sender, receipts, return_exceptions=True)
            _close(self._writer)
        return r

    async def _send(self, deadline_ns: int) -> None:
        spec, r = self.spec, self.result
        writer = self._writer
        assert writer is not None
        write, drain = writer.write, writer.drain
        template, send_ts = self._template, self._send_ts
        windowed, window = self._windowed, spec.window
        plain = spec.count if windowed else spec.count - 1  # the last one carries a receipt
        ns_per_msg = 1e9 / spec.rate if spec.rate else 0.0
        sent = 0
        t0 = now_ns()
        r.first_send_ns = t0
        while sent < plain:
            now = now_ns()
            if now > deadline_ns:
                raise TimeoutError(f"producer deadline passed after {sent} sends")
            n = min(BATCH, plain - sent)
            if ns_per_msg:
                due = int((now - t0) / ns_per_msg) + 1
                if due <= sent:
                    # at least a 1 ms tick: event-loop timers are millisecond-grained, and a
                    # shorter sleep would spin and take CPU from the broker
                    wait_ns = t0 + sent * ns_per_msg - now
                    await asyncio.sleep(min(max(wait_ns / 1e9, PACE_TICK), 0.01))
                    continue
                n = min(n, due - sent)
            if windowed:
                room = window - (sent - self._acked)
                if room <= 0:
                    self._room.clear()
                    await asyncio.wait_for(self._room.wait(), max(0.0, (deadline_ns - now) / 1e9))
                    continue
                n = min(n, room)
                data = b"".join([template % (seq, now) for seq in range(sent + 1, sent + n + 1)])
                send_ts[sent + 1 : sent + n + 1] = array("q", [now]) * n
            else:
                data = (template % now) * n
            write(data)
            sent += n
            r.sent = sent
            await drain()
            await asyncio.sleep(0)  # let the other clients of this process run
        if not windowed:
            now = now_ns()
            send_ts[spec.count] = now
            write(self._last_template % (spec.count, now))
            sent += 1
            r.sent = sent
            await drain()
        r.last_send_ns = now_ns()

    async def _read_receipts(self) -> None:
        reader, r = self._reader, self.result
        assert reader is not None
        buf, ids, lat, out = self._buf, [], array("q"), Scan()
        send_ts, limit = self._send_ts, len(self._send_ts)
        try:
            while self._acked < self._expected_receipts:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("broker closed the producer connection")
                now = now_ns()
                buf = buf + data if buf else data
                ids.clear()
                scan(buf, now, None, ids, out)
                buf = buf[out.consumed :]
                if out.receipts:
                    for i in ids:
                        if 0 < i < limit:
                            lat.append(now - send_ts[i])
                    self._acked += out.receipts
                    r.receipts = self._acked
                    r.last_receipt_ns = now
                    self._room.set()
        finally:
            r.latencies = lat.tobytes()


class Consumer:
    """Subscribes and counts MESSAGE frames until ``spec.expected`` arrived."""

    def __init__(self, spec: ConsumerSpec, dialect: Dialect, sub_id: str, latency: bool) -> None:
        self.spec = spec
        self._dialect = dialect
        self._sub_id = sub_id
        self._lat = array("q") if latency else None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._buf = b""
        self._scan = Scan()
        self._unacked = 0
        self.result = ClientResult("consumer", spec.destination)

    async def connect(self, host: str, port: int, timeout: float) -> None:
        self._reader, self._writer, self._buf = await open_stomp(host, port, self._dialect, timeout)

    async def subscribe(self, timeout: float) -> None:
        """SUBSCRIBE with a receipt and wait for it (counting any early deliveries)."""
        d = self._dialect
        headers = [
            ("id", self._sub_id),
            ("destination", d.destination(self.spec.destination)),
            ("ack", "auto" if d.ack == "auto" else "client"),
            *d.subscribe_headers,
            *self.spec.extra_headers,
            ("receipt", "subscribed"),
        ]
        assert self._writer is not None and self._reader is not None
        self.result.subscribe_ns = now_ns()
        self._writer.write(render("SUBSCRIBE", headers))
        deadline = time.monotonic() + timeout
        while not self._consume(self._buf, now_ns()):
            data = await asyncio.wait_for(
                self._reader.read(READ_SIZE), max(0.001, deadline - time.monotonic())
            )
            if not data:
                raise ConnectionError("connection closed before the SUBSCRIBE receipt")
            self._buf += data

    def _consume(self, buf: bytes, now: int) -> int:
        """Scan ``buf``: count and ack messages, keep the tail; returns RECEIPTs seen."""
        out = scan(buf, now, self._lat, None, self._scan)
        r = self.result
        if out.messages:
            if not r.received:
                r.first_recv_ns = now
            r.received += out.messages
            r.last_recv_ns = now
            if self._dialect.ack != "auto":
                self._unacked += out.messages
                if self._unacked >= self._dialect.ack_every or r.received >= self.spec.expected:
                    ident = ack_id(buf, out.last_message, out.last_header_end)
                    if ident is not None and self._writer is not None:
                        self._writer.write(b"ACK\nid:" + ident + b"\n\n\0")
                    self._unacked = 0
        self._buf = buf[out.consumed :]
        return out.receipts

    async def run(self, deadline_ns: int) -> ClientResult:
        r = self.result
        reader = self._reader
        assert reader is not None
        r.start_ns = now_ns()
        expected = self.spec.expected
        try:
            if self._buf:
                self._consume(self._buf, now_ns())
            while r.received < expected:
                remaining = (deadline_ns - now_ns()) / 1e9
                if remaining <= 0:
                    raise TimeoutError(f"consumer got {r.received}/{expected} before the deadline")
                data = await asyncio.wait_for(reader.read(READ_SIZE), remaining)
                if not data:
                    raise ConnectionError(f"broker closed the consumer after {r.received}/{expected}")
                buf = self._buf
                self._consume(buf + data if buf else data, now_ns())
            if self._writer is not None:
                await self._writer.drain()  # the last ACK
        except (OSError, BrokerError, TimeoutError, asyncio.IncompleteReadError) as exc:
            r.error = f"{type(exc).__name__}: {exc} (received {r.received}/{expected})"
        finally:
            if self._lat is not None:
                r.latencies = self._lat.tobytes()
            _close(self._writer)
        return r
