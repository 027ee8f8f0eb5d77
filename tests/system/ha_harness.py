"""The shared-store HA system tests' harness: a primary and a backup on one data directory
(`Pair`), and loads that count every message in the chaos `Ledger`: `CoreLoad` (a producer and
a consumer on one CORE failover connection) and `StompLoad` (threads that reconnect to whichever
process listens and resend unreceipted sends with their duplicate ids)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path

from petrel.client import ClientError, Connection, Message, connect
from petrel.ha.node_manager import STATE_OFFSET
from petrel.testing.chaos.channels import ChannelError, Spec, body_mid, stomp_consumer, stomp_producer
from petrel.testing.chaos.ledger import Ledger, message_id
from petrel.testing.process import BrokerProcess, wait_for

FAST = "initialReconnectDelay=10&maxReconnectDelay=100&randomize=false"
WAITING = ("backup", "failing-back")  # /health of a node that waits for the live lock

# -- the pair ----------------------------------------------------------------------------------


class Pair:
    """A primary ``p`` and a backup ``b`` on the data directory ``shared``."""

    def __init__(self, root: Path, policy: str = "", shared: Path | None = None, top: str = "") -> None:
        self.shared = shared or root / "shared"
        self.p = BrokerProcess(root / "p", name="p", http=True, data_dir=self.shared,
                               settings=f'{top}[ha_policy]\nshared_store = "primary"\n{policy}')
        self.b = BrokerProcess(root / "b", name="b", http=True, data_dir=self.shared,
                               settings=f'{top}[ha_policy]\nshared_store = "backup"\n{policy}')
        self.nodes = (self.p, self.b)

    def start(self) -> Pair:
        self.p.start(wait=False)
        self.p.wait_state("ok")
        self.b.start(wait=False)
        self.b.wait_state("backup")
        return self

    def live(self) -> BrokerProcess:
        """The node that serves now (exactly one)."""
        serving = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None
                   and n.health().get("status") == "ok"]
        assert len(serving) == 1, f"{len(serving)} nodes serve: {[n.health() for n in self.nodes]}"
        return serving[0]

    def other(self, node: BrokerProcess) -> BrokerProcess:
        return self.b if node is self.p else self.p

    def state_byte(self) -> str:
        with open(self.shared / "server.lock", "rb") as f:
            f.seek(STATE_OFFSET)
            return f.read(1).decode()

    def failover_url(self) -> str:
        return f"failover:(tcp://127.0.0.1:{self.p.port},tcp://127.0.0.1:{self.b.port})?{FAST}"

    def kill(self) -> None:
        for n in self.nodes:
            n.kill9()


def ha(node: BrokerProcess) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/api/v1/ha", timeout=5) as r:
        return json.loads(r.read())


def fail_over(pair: Pair, how: str = "kill9") -> tuple[BrokerProcess, float]:
    """Kill (or stop) the live; wait for the other to serve. (the new live, seconds it took)"""
    live = pair.live()
    other = pair.other(live)
    t0 = time.monotonic()
    live.kill9() if how == "kill9" else live.stop()
    other.wait_state("ok")
    return other, time.monotonic() - t0


def run(coro, timeout: float = 600.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def report(label: str, times: list[float]) -> None:
    if times:
        print(f"{label}: {len(times)} failovers, {min(times):.2f}..{max(times):.2f}s "
              f"(mean {sum(times) / len(times):.2f}s), measured from the kill to /health ok")


def verdict(ledger: Ledger) -> None:
    v = ledger.check()
    print(f"sent {v.sent}, confirmed {v.confirmed}, redelivered {v.redelivered}")
    assert v.ok, v.defects()
    assert v.confirmed > 0


# -- CORE: the failover client ---------------------------------------------------------------


class CoreLoad:
    """A producer and a consumer on one failover connection, counted in a Ledger. The producer
    sends up to ``cap`` (raised by the test); every send is confirmed by the final flush (the
    client resends unconfirmed ones, with duplicate ids, after each failover)."""

    QUEUE = "ha.core"

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.cap = 0
        self.sent = 0
        self.received = 0
        self.stopping = False
        self.errors: list[str] = []

    async def open(self, url: str) -> None:
        self.conn = await connect(url)
        self.psession = await self.conn.session()
        self.producer = self.psession.producer(f"queue://{self.QUEUE}")
        self.csession = await self.conn.session()
        self.consumer = await self.csession.consumer(f"queue://{self.QUEUE}", ack="client")

    @property
    def confirmed(self) -> int:
        return self.sent - self.psession.unconfirmed

    async def produce(self) -> None:
        while not self.stopping:
            if self.sent >= self.cap:
                await asyncio.sleep(0.01)
                continue
            mid = message_id(0, self.sent)
            self.ledger.sent(mid, (self.QUEUE,))
            await self.producer.send(Message(mid.encode()))
            self.sent += 1

    async def consume(self) -> None:
        batch: list[Message] = []
        while not self.stopping:
            try:
                m = await self.consumer.receive(0.3)
            except ClientError as exc:  # the client gave up: the test fails on it
                self.errors.append(repr(exc))
                return
            if m is not None:
                if batch and m._epoch != batch[0]._epoch:
                    batch = []  # delivered before a failover: the broker redelivers those
                self.received += 1
                self.ledger.delivered(self.QUEUE, m.body.decode(), redelivered=m.delivery_count > 0)
                batch.append(m)
            if batch and (m is None or len(batch) >= 20):
                await self._ack(batch)
                batch = []

    async def _ack(self, batch: list[Message]) -> None:
        mids = [m.body.decode() for m in batch]
        self.ledger.ack_sent(self.QUEUE, mids)
        try:
            settled = await self.consumer.ack(batch[-1], cumulative=True)
        except ClientError:
            return  # in doubt: a redelivery is allowed, the ledger does not count it confirmed
        if settled >= len(batch):  # 0 when the batch's connection was lost: they come again
            self.ledger.ack_confirmed(self.QUEUE, mids)

    async def finish(self) -> None:
        await wait_until(lambda: self.sent >= self.cap, 120)
        await self.psession.flush()
        self.ledger.confirmed([message_id(0, i) for i in range(self.sent)])
        await wait_until(lambda: self.received >= self.sent, 120)
        self.stopping = True


async def wait_until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


def drain_core(node: BrokerProcess, queue: str, ledger: Ledger) -> int:
    """Take what is left in ``queue`` on the live ``node``, each acknowledged."""
    taken = 0
    with Connection(f"tcp://127.0.0.1:{node.port}") as conn:
        session = conn.session()
        consumer = session.consumer(f"queue://{queue}", ack="client")
        while (m := consumer.receive(1.0)) is not None:
            ledger.drained(queue, body_mid(m.body))
            session._run(consumer._async.ack(m))
            taken += 1
        session.close()
    return taken


def kill_cycles(pair: Pair, cycles: int, progressed, how: str = "kill9") -> list[float]:
    """``cycles`` times: wait until ``progressed(k)``, kill the live, wait for the other to serve,
    start the killed one again and wait until it waits (as a backup, or a primary waiting for
    the lock). The seconds each takeover took."""
    times = []
    for k in range(cycles):
        wait_for(lambda: progressed(k), 120, 0.02, message=f"no progress in cycle {k}")
        live = pair.live()
        _, took = fail_over(pair, how)
        times.append(took)
        live.start(wait=False)
        live.wait_state(*WAITING)
    return times


# -- STOMP: receipts, duplicate ids, reconnecting to whichever serves ---------------------------


def open_any(ports: list[int], opener):
    """A channel to the first of ``ports`` that accepts (the backup listens on nothing)."""
    errors = []
    for port in ports:
        try:
            return opener(port)
        except ChannelError as exc:
            errors.append(str(exc))
    raise ChannelError("; ".join(errors))


class StompLoad:
    """A producer thread (batches with receipts; unreceipted sends resent with the same
    ``_AMQ_DUPL_ID`` after reconnecting) and a consumer thread (client-individual acks with
    receipts), both reconnecting to whichever node serves."""

    QUEUE = "ha.stomp"

    def __init__(self, ports: list[int], ledger: Ledger) -> None:
        self.ports, self.ledger = ports, ledger
        self.cap = 0
        self.next = 0
        self.received = 0
        self.reconnects = 0
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                        for f in (self._produce, self._consume)]

    def start(self) -> StompLoad:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(60)

    def _guard(self, fn) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def _produce(self) -> None:
        resend: list[Spec] = []
        while not self.stopping.is_set():
            try:
                channel = open_any(self.ports, lambda port: stomp_producer(
                    port, f"/queue/{self.QUEUE}", False, self.ledger.confirmed))
            except ChannelError:
                self.stopping.wait(0.05)
                continue
            try:
                while not self.stopping.is_set():
                    if resend:
                        batch, resend = resend, []
                    elif self.next < self.cap:
                        size = min(10, self.cap - self.next)
                        batch = [self._spec(self.next + i) for i in range(size)]
                        self.next += size
                    else:
                        self.stopping.wait(0.01)
                        continue
                    for spec in batch:
                        self.ledger.sent(spec.mid, (self.QUEUE,))
                    try:
                        channel.send(batch)
                    except ChannelError:
                        unconfirmed = set(self.ledger.unconfirmed())
                        resend = [s for s in batch if s.mid in unconfirmed]
                        self.reconnects += 1
                        break
            finally:
                channel.abort()

    @staticmethod
    def _spec(n: int) -> Spec:
        mid = message_id(0, n)
        return Spec(mid, f"{mid}|".encode() + b"x" * 100, True, duplicate_id=f"dup-{mid}")

    def _consume(self) -> None:
        def delivered(d) -> None:
            self.received += 1
            self.ledger.delivered(self.QUEUE, d.mid, redelivered=d.redelivered)

        def confirmed(batch) -> None:
            self.ledger.ack_confirmed(self.QUEUE, [d.mid for d in batch])

        while not self.stopping.is_set():
            try:
                channel = open_any(self.ports, lambda port: stomp_consumer(
                    port, f"/queue/{self.QUEUE}", "client-individual", client_id=None, subscription=None,
                    on_delivery=delivered, on_ack_confirmed=confirmed))
            except ChannelError:
                self.stopping.wait(0.05)
                continue
            batch: list = []
            try:
                while not self.stopping.is_set():
                    d = channel.receive(0.2)
                    if d is not None:
                        batch.append(d)
                    if batch and (d is None or len(batch) >= 20):
                        channel.ack(batch, lambda b: self.ledger.ack_sent(self.QUEUE, [x.mid for x in b]))
                        batch = []
            except ChannelError:
                pass  # the live went away: reconnect to whichever serves now (the loop goes on)
            finally:
                channel.abort()


# -- load in steps, the faults between them -------------------------------------------------------


async def core_load(pair: Pair, steps, per_step: int = 300) -> CoreLoad:
    """CORE load on the pair's failover URL; each of ``steps`` (a blocking callable) runs once
    half of its ``per_step`` messages are confirmed; then every message is consumed."""
    loop = asyncio.get_running_loop()
    load = CoreLoad(Ledger())
    await load.open(pair.failover_url())
    tasks = [asyncio.ensure_future(load.produce()), asyncio.ensure_future(load.consume())]
    try:
        for k, step in enumerate(steps):
            load.cap = (k + 1) * per_step
            await wait_until(lambda: load.confirmed >= k * per_step + per_step // 2 and
                             load.received > k * per_step // 2, 120)
            await loop.run_in_executor(None, step)
        load.cap = (len(steps) + 1) * per_step
        await load.finish()
        await asyncio.gather(*tasks)
    finally:
        load.stopping = True
        load.failovers = load.conn.failovers
        await load.conn.close()
    assert not load.errors, load.errors
    return load


async def drain_bodies(conn, destination: str) -> list[bytes]:
    session = await conn.session()
    consumer = await session.consumer(destination)
    out = []
    while (m := await consumer.receive(1.0)) is not None:
        out.append(m.body)
    await session.close()
    return out


def send_confirmed(pair: Pair, ledger: Ledger, first: int, count: int) -> None:
    channel = open_any([pair.p.stomp_port, pair.b.stomp_port],
                       lambda port: stomp_producer(port, f"/queue/{StompLoad.QUEUE}", False, ledger.confirmed))
    try:
        for start in range(first, first + count, 10):
            batch = [StompLoad._spec(n) for n in range(start, start + 10)]
            for spec in batch:
                ledger.sent(spec.mid, (StompLoad.QUEUE,))
            channel.send(batch)
    finally:
        channel.close()
