"""The CORE clients of `core_rows.py`: a producer and a consumer on one `petrel.client`
connection each, reporting like stompbench's STOMP clients (`ClientResult`)."""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import Callable, Coroutine

from petrel.client import Message, connect
from stompbench.clients import ClientResult
from stompbench.workloads import ConsumerSpec, ProducerSpec

CONNECT_TIMEOUT = 30.0
CONSUMER_WINDOW = 2 * 1024 * 1024
now_ns = time.monotonic_ns  # CLOCK_MONOTONIC, as stompbench stamps its bench-ts
TS = "bench-ts"

def core_destination(logical: str) -> str:
    """stompbench's ``queue:X`` / ``topic:X`` as the client's ``queue://X`` / ``topic://X``."""
    kind, _, name = logical.partition(":")
    if kind not in ("queue", "topic"):
        raise ValueError(f"destination must be queue:NAME or topic:NAME, not {logical!r}")
    return f"{kind}://{name}"


class CoreProducer:
    """Sends ``spec.count`` messages on one connection, then waits until all are confirmed."""

    def __init__(self, spec: ProducerSpec, body: bytes, window_bytes: int) -> None:
        self.spec = spec
        self.body = body
        self.window_bytes = window_bytes
        self.result = ClientResult("producer", spec.destination)
        self.conn = None
        self.session = None
        self.producer = None

    async def connect(self, url: str) -> None:
        self.conn = await asyncio.wait_for(connect(url, confirmation_window=self.window_bytes), CONNECT_TIMEOUT)
        self.session = await self.conn.session()
        self.producer = self.session.producer(core_destination(self.spec.destination))

    async def run(self, deadline_ns: int) -> ClientResult:
        r, spec = self.result, self.spec
        try:
            await asyncio.wait_for(self._send(), max(0.0, (deadline_ns - now_ns()) / 1e9))
        except Exception as exc:  # a timeout, the connection, a refused send: report it
            r.error = f"{type(exc).__name__}: {exc} (sent {r.sent}/{spec.count}, confirmed {r.receipts})"
        return r

    async def _send(self) -> None:
        r, spec = self.result, self.spec
        send, body, durable = self.producer.send, self.body, spec.persistent
        ns_per_msg = 1e9 / spec.rate if spec.rate else 0.0
        t0 = now_ns()
        r.start_ns = r.first_send_ns = t0
        sent = 0
        if ns_per_msg:
            while sent < spec.count:
                now = now_ns()
                due = min(spec.count, int((now - t0) / ns_per_msg) + 1)
                if due <= sent:
                    wait = (t0 + sent * ns_per_msg - now) / 1e9
                    await asyncio.sleep(min(max(wait, 0.0002), 0.01))
                    continue
                while sent < due:
                    await send(Message(body, {TS: now_ns()}, durable=durable))
                    sent += 1
                r.sent = sent
        else:
            for _ in range(spec.count):
                await send(Message(body, {TS: now_ns()}, durable=durable))
            sent = r.sent = spec.count
        r.last_send_ns = now_ns()
        await self.session.flush()
        r.last_receipt_ns = now_ns()
        r.receipts = sent

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close(timeout=5)


class CoreConsumer:
    """Counts deliveries in a listener until ``spec.expected`` arrived."""

    def __init__(self, spec: ConsumerSpec, latency: bool) -> None:
        self.spec = spec
        self.result = ClientResult("consumer", spec.destination)
        self._lat = array("q") if latency else None
        self.conn = None
        self.consumer = None
        self._done: asyncio.Future | None = None

    async def connect(self, url: str) -> None:
        self.conn = await asyncio.wait_for(connect(url, consumer_window=CONSUMER_WINDOW), CONNECT_TIMEOUT)

    async def subscribe(self) -> None:
        self._done = asyncio.get_running_loop().create_future()
        session = await self.conn.session()
        self.result.subscribe_ns = now_ns()
        self.consumer = await asyncio.wait_for(
            session.consumer(core_destination(self.spec.destination), ack="auto"), CONNECT_TIMEOUT)
        self.consumer.set_listener(self._on_message)

    def _on_message(self, message: Message) -> None:
        now = now_ns()
        r = self.result
        if not r.received:
            r.first_recv_ns = now
        r.received += 1
        r.last_recv_ns = now
        if self._lat is not None:
            ts = message.properties.get(TS)
            if ts is not None:
                self._lat.append(now - ts)
        if r.received >= self.spec.expected and not self._done.done():
            self._done.set_result(None)

    async def run(self, deadline_ns: int) -> ClientResult:
        r = self.result
        r.start_ns = now_ns()
        try:
            await asyncio.wait_for(asyncio.shield(self._done), max(0.0, (deadline_ns - now_ns()) / 1e9))
        except asyncio.TimeoutError:
            r.error = f"TimeoutError: consumer got {r.received}/{self.spec.expected} before the deadline"
        finally:
            if self._lat is not None:
                r.latencies = self._lat.tobytes()
        return r

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close(timeout=5)


def worker_main(run: Callable[[], Coroutine], barrier, results, failed: Callable[[str], tuple]) -> None:
    """The body of a client worker process: uvloop when there is one, ``asyncio.run(run())``,
    then its result on ``results``; any failure aborts ``barrier`` (so the others stop waiting)
    and puts ``failed(reason)`` there instead."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    logging.basicConfig(level=logging.WARNING)
    try:
        results.put(asyncio.run(run()))
    except BaseException as exc:  # report every failure to the parent, then exit
        try:
            barrier.abort()
        except Exception:
            pass
        results.put(failed(f"{type(exc).__name__}: {exc}"))
