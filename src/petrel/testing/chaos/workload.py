"""The producers and consumers of a chaos run: threads that connect (again and again, through
faults), send or consume, and record every step in the `Ledger`.

Producers pace their sends over the plan's duration, in batches that each end with a
confirmation. A batch not confirmed is in doubt; with duplicate ids it is sent again after a
reconnect (the broker must drop the copies), without them it is left as it is. Consumers
acknowledge in batches by the plan's ack mode; a `drop()` makes one disconnect abruptly after
its next batch, before acknowledging it; with churn they leave and join again at random.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from petrel.testing.chaos.amqp_channels import amqp_consumer, amqp_producer
from petrel.testing.chaos.channels import (
    ChannelError,
    Spec,
    core_consumer,
    core_producer,
    stomp_consumer,
    stomp_producer,
)
from petrel.testing.chaos.mqtt_channels import mqtt_consumer, mqtt_producer, subscription_queue
from petrel.testing.chaos.openwire_channels import OpenWireTarget, openwire_consumer, openwire_producer
from petrel.testing.chaos import security
from petrel.testing.chaos.ledger import Ledger, message_id
from petrel.testing.chaos.plan import Plan
from petrel.testing.chaos.timeline import Timeline

__all__ = ["QUEUE", "TOPIC", "Consumer", "Producer", "Workload", "streams_of"]

QUEUE = "chaos.q"
TOPIC = "chaos.t"


def subscriber(k: int) -> tuple[str, str]:
    """(client id, subscription name) of durable subscription k."""
    return f"chaos-c{k}", f"sub{k}"


#: protocol -> (producer channel, consumer channel); STOMP connects to the STOMP port, the others
#: to the all-protocols port.
CHANNELS = {
    "STOMP": (stomp_producer, stomp_consumer),
    "CORE": (core_producer, core_consumer),
    "AMQP": (amqp_producer, amqp_consumer),
    "MQTT": (mqtt_producer, mqtt_consumer),
    "OPENWIRE": (openwire_producer, openwire_consumer),
}


def _login(plan: Plan):
    """What a channel of this run's protocol logs in with (`security`)."""
    if plan.protocol == "CORE":
        return security.core_login(plan)
    if plan.protocol in ("AMQP", "MQTT", "OPENWIRE"):  # SASL PLAIN / CONNECT's user name, or anonymous
        return security.stomp_login(plan) if security.secured(plan) else None
    return security.stomp_login(plan)


def _port(plan: Plan, ports: Ports, peers: tuple[int, ...] = (), anchored: bool = False) -> int | OpenWireTarget:
    """Where a channel connects: a port, or (OpenWire) the failover URL's ports, this node's first,
    then its other process's (a pair) and the other nodes' (`peers`); `anchored`: this node only."""
    if plan.protocol == "OPENWIRE":
        return OpenWireTarget((ports.core, *(core for _, core in ports.others), *peers),
                              repeats=plan.topology == "cluster", anchored=anchored)
    return ports.stomp if plan.protocol == "STOMP" else ports.core


def streams_of(plan: Plan) -> tuple[str, ...]:
    """The queues every message of the plan must reach (one per durable subscription)."""
    if plan.destination == "queue":
        return (QUEUE,)
    if plan.protocol == "MQTT":  # a persistent session's subscription queue
        return tuple(subscription_queue(subscriber(k)[0]) for k in range(plan.subscriptions))
    return tuple(".".join(subscriber(k)) for k in range(plan.subscriptions))


@dataclass
class Ports:
    node: int
    stomp: int
    core: int
    others: tuple[tuple[int, int], ...] = ()  # (stomp, core) of the node's other process (a pair)

    def rotated(self) -> Ports:
        """The next process's ports (a pair's backup listens only once it serves)."""
        if not self.others:
            return self
        (stomp, core), rest = self.others[0], self.others[1:]
        return Ports(self.node, stomp, core, rest + ((self.stomp, self.core),))


class _Worker(threading.Thread):
    def __init__(self, name: str, plan: Plan, ledger: Ledger, timeline: Timeline, ports: Ports,
                 rng: random.Random) -> None:
        super().__init__(name=name, daemon=True)
        self.plan, self.ledger, self.timeline, self.ports, self.rng = plan, ledger, timeline, ports, rng
        self.stopping = threading.Event()
        self.peers: tuple[int, ...] = ()  # the other nodes' all-protocols ports (OpenWire's failover URL)
        self.failures = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    if self.session():
                        return
                except ChannelError as exc:
                    self.failures += 1
                    self.failed()
                    self.timeline.note(f"{self.name} on node {self.ports.node}: {exc}")
                    if self.ports.others:  # the other process of the pair may serve now
                        self.ports = self.ports.rotated()
                    self.stopping.wait(0.05 if self.ports.others else 0.2)
        except BaseException as exc:  # noqa: BLE001 - reported by the runner
            self.error = exc
            self.timeline.note(f"{self.name} crashed: {exc!r}")

    def session(self) -> bool:
        """One connection's work; True when the worker is done."""
        raise NotImplementedError

    def failed(self) -> None:
        """The connection failed (after the timeline has it)."""

    def note(self, text: str) -> None:
        """What the channel says of itself (an OpenWire client's failovers), in the timeline."""
        self.timeline.note(f"{self.name}: {text}")


class Producer(_Worker):
    def __init__(self, index: int, destination: str, *args) -> None:
        super().__init__(f"producer {index}", *args)
        self.index = index
        self.destination = destination
        self.next = 0
        self.resend: list[Spec] = []
        self.started = 0.0
        self.done = threading.Event()

    def spec(self, seq: int) -> Spec:
        plan, rng = self.plan, self.rng
        mid = message_id(self.index, seq)
        head = f"{mid}|".encode()
        body = head + b"x" * max(plan.body_size - len(head), 0)
        priority = rng.randint(0, 9) if plan.feature == "priority" else None
        delay = rng.choice((None, None, rng.randint(1, 1500))) if plan.feature == "scheduled" else None
        group = f"g{seq % 4}" if plan.feature == "groups" else None
        dup = f"{plan.seed}-{mid}" if plan.duplicate_ids else None
        return Spec(mid, body, plan.persistent, priority, delay, group, dup)

    def pace(self) -> None:
        due = self.started + self.next * self.plan.duration / self.plan.messages
        delay = due - time.monotonic()
        if delay > 0:
            self.stopping.wait(min(delay, 1.0))

    def session(self) -> bool:
        plan = self.plan
        if not self.started:
            self.started = time.monotonic()
        open_ = CHANNELS[plan.protocol][0]
        extra = {"may_repeat": self.ledger.may_repeat, "note": self.note} if plan.protocol == "OPENWIRE" else {}
        channel = open_(_port(plan, self.ports, self.peers), self.destination,
                        plan.ack == "transacted", self.ledger.confirmed, login=_login(plan), **extra)
        streams = streams_of(plan)
        try:
            while not self.stopping.is_set():
                resending = bool(self.resend)
                if resending:
                    batch, self.resend = self.resend, []
                    self.timeline.note(f"{self.name} resends {len(batch)} in doubt")
                    if plan.protocol == "OPENWIRE" and plan.topology == "cluster":
                        # its failover URL may have taken it to another node, which does not
                        # know the duplicate ids the first node saw
                        self.ledger.may_repeat([s.mid for s in batch])
                elif self.next < plan.messages:
                    self.pace()
                    size = min(self.rng.randint(1, 16), plan.messages - self.next)
                    batch = [self.spec(self.next + i) for i in range(size)]
                    self.next += size
                else:
                    self.done.set()
                    return True
                for spec in batch:
                    self.ledger.sent(spec.mid, streams, durable=spec.durable)
                try:
                    channel.send(batch)
                except ChannelError as exc:
                    if resending and plan.ack == "transacted" and "duplicate message" in str(exc):
                        # the resent transaction is refused for a duplicate: the broker holds the
                        # earlier, in-doubt commit of this very batch (one transaction, all of it)
                        self.ledger.confirmed([s.mid for s in batch])
                        self.timeline.note(f"{self.name}: the {len(batch)} resent are duplicates: "
                                           "their in-doubt commit went through")
                        raise
                    if plan.duplicate_ids:
                        unconfirmed = set(self.ledger.unconfirmed())
                        self.resend = [s for s in batch if s.mid in unconfirmed]
                        self.ledger.resent([s.mid for s in self.resend])
                    raise
        finally:
            channel.abort() if self.stopping.is_set() else channel.close()
        return False


class Consumer(_Worker):
    def __init__(self, index: int, destination: str, stream: str, client_id: str | None,
                 subscription: str | None, *args) -> None:
        super().__init__(f"consumer {index}", *args)
        self.index = index
        self.destination = destination
        self.stream = stream
        self.client_id = client_id
        self.subscription = subscription
        self.subscribed = threading.Event()
        self._drop = threading.Event()
        self._hold = 0.0
        self.received = 0

    def drop(self, hold: float) -> None:
        """Disconnect abruptly after the next batch, before acknowledging it; back after `hold` s."""
        self._hold = hold
        self._drop.set()

    def failed(self) -> None:
        if self.plan.ack == "auto" and self.plan.protocol == "STOMP":
            self.ledger.at_most_once(self.stream)

    def _delivered(self, d) -> None:
        self.received += 1
        self.ledger.delivered(self.stream, d.mid, redelivered=d.redelivered)
        if self.plan.ack == "auto":
            self.ledger.ack_sent(self.stream, [d.mid])

    def _ack_sent(self, batch) -> None:
        self.ledger.ack_sent(self.stream, [d.mid for d in batch])

    def _ack_confirmed(self, batch) -> None:
        self.ledger.ack_confirmed(self.stream, [d.mid for d in batch])

    def session(self) -> bool:
        plan = self.plan
        open_ = CHANNELS[plan.protocol][1]
        extra = {"note": self.note} if plan.protocol == "OPENWIRE" else {}
        # a durable subscriber stays with its node: its subscription lives there
        channel = open_(_port(plan, self.ports, self.peers, anchored=self.subscription is not None),
                        self.destination, plan.ack,
                        client_id=self.client_id, subscription=self.subscription,
                        on_delivery=self._delivered, on_ack_confirmed=self._ack_confirmed, login=_login(plan),
                        **extra)
        self.subscribed.set()
        leave_at = time.monotonic() + self.rng.uniform(1.0, 4.0) if plan.churn else float("inf")
        batch: list = []
        size = self.rng.randint(1, 20)
        try:
            while not self.stopping.is_set():
                d = channel.receive(0.2)
                if d is not None:
                    batch.append(d)
                if batch and (len(batch) >= size or d is None):
                    if self._drop.is_set():
                        self._drop.clear()
                        self.timeline.note(f"{self.name} drops its connection with {len(batch)} unacknowledged")
                        channel.abort()
                        self.failed()
                        self.stopping.wait(self._hold)
                        return False
                    channel.ack(batch, self._ack_sent)
                    batch = []
                    size = self.rng.randint(1, 20)
                if time.monotonic() > leave_at:
                    channel.ack(batch, self._ack_sent)
                    channel.close()
                    pause = self.rng.uniform(0.2, 1.5)
                    self.timeline.note(f"{self.name} leaves for {pause:.1f}s")
                    self.stopping.wait(pause)
                    return False
            channel.ack(batch, self._ack_sent)
        finally:
            channel.abort()
        return True


class Workload:
    """`ports[n]`: where node n listens. Producers go to the first nodes, consumers (and durable
    subscribers) to the last, so a cluster forwards. A durable subscription whose node is down or
    cut off still gets every message: the producers' nodes keep its binding while their bridge
    to that node reconnects, and its copies wait in their store-and-forward queue."""

    def __init__(self, plan: Plan, ledger: Ledger, timeline: Timeline, ports: list[Ports],
                 consumer_ports: list[Ports] | None = None) -> None:
        """`consumer_ports`: where the consumers go instead (the drain topology: the target)."""
        self.plan = plan
        rng = random.Random(plan.seed * 7919 + 1)
        n = len(ports)
        cports = consumer_ports or ports
        m = len(cports)
        topic = plan.destination == "durable-topic"
        dest = f"/queue/{QUEUE}" if plan.protocol == "STOMP" else f"queue://{QUEUE}"
        if topic:
            dest = f"/topic/{TOPIC}" if plan.protocol == "STOMP" else f"topic://{TOPIC}"
        self.producers = [
            Producer(i, dest, plan, ledger, timeline, ports[i % n],
                     random.Random(rng.random()))
            for i in range(plan.producers)
        ]
        self.consumers = []
        if topic:
            for k in range(plan.subscriptions):
                client_id, sub = subscriber(k)
                self.consumers.append(Consumer(k, dest, streams_of(plan)[k], client_id, sub, plan, ledger, timeline,
                                               cports[(m - 1 - k) % m], random.Random(rng.random())))
        else:
            for k in range(plan.consumers):
                self.consumers.append(Consumer(k, dest, QUEUE, None, None, plan, ledger, timeline,
                                               cports[(m - 1 - k) % m], random.Random(rng.random())))

        for w in self.producers:
            w.peers = tuple(p.core for p in ports if p.node != w.ports.node)
        for w in self.consumers:
            w.peers = tuple(p.core for p in cports if p.node != w.ports.node)

    def start_consumers(self, timeout: float = 60) -> None:
        for c in self.consumers:
            c.start()
        deadline = time.monotonic() + timeout
        for c in self.consumers:
            if not c.subscribed.wait(max(deadline - time.monotonic(), 0)):
                raise TimeoutError(f"{c.name} did not subscribe within {timeout}s")

    def start_producers(self) -> None:
        for p in self.producers:
            p.start()

    def producers_done(self) -> bool:
        return all(p.done.is_set() or not p.is_alive() for p in self.producers)

    def stop(self) -> None:
        workers = self.producers + self.consumers
        for w in workers:
            w.stopping.set()
        for w in workers:
            w.join(30)

    def errors(self) -> list[str]:
        return [f"{w.name}: {w.error!r}" for w in self.producers + self.consumers if w.error is not None]
