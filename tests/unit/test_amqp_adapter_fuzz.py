"""The AMQP adapter in-process against random sequences of well-formed performatives (seeded,
so a failure replays): no sequence gets an internal error, and once every connection is gone
no queue counts a delivery in flight (every reference went back or was acknowledged)."""

from __future__ import annotations

import asyncio
import random

from petrel.codec.amqp import NEED_DATA, AmqpConnection, Frame, protocol_header
from petrel.codec.amqp.message import AmqpMessage, encode_message
from petrel.codec.amqp.performatives import (
    Accepted, Attach, Begin, Close, Coordinator, Declare, Detach, Discharge, Disposition, End, Flow, Modified,
    Open, Rejected, Released, Source, Target, TransactionalState, Transfer,
)
from petrel.codec.roles import Role
from petrel.config import BrokerConfig
from petrel.server.broker import Broker

ADDRESSES = ["queue://fa", "queue://fb", "topic://ft", "fa", None]


class Capture:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False
        self.writing_paused = False
        self.peer = "fuzz"
        self.transport = None

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self, **kw) -> None:
        self.closed = True

    def call_later(self, delay, fn):
        return asyncio.get_running_loop().call_later(delay, fn)


def random_frames(rng: random.Random) -> bytes:
    """A client's frames: mostly on links it attached (a few on others, which end the connection)."""
    client = AmqpConnection(Role.CLIENT)
    out = client.send_header(0) + client.send(0, Open(container_id=f"c{rng.randrange(3)}"))
    out += client.send(0, Begin(next_outgoing_id=0, incoming_window=1000, outgoing_window=1000))
    client.peer_max_frame_size = 4096
    delivery_id = 0
    receivers: list[int] = []  # the client receives on these handles
    senders: list[int] = []  # the client sends on these
    free = list(range(8))

    def pick(handles: list[int]) -> int | None:
        """One of `handles`; now and then one never attached (None: skip this frame)."""
        if rng.random() < 0.02:
            return rng.randrange(8, 12)
        return rng.choice(handles) if handles else None

    for _ in range(rng.randrange(1, 40)):
        kind = rng.randrange(10)
        if kind == 0 and free:
            handle = free.pop(rng.randrange(len(free)))
            receivers.append(handle)
            out += client.send(0, Attach(name=f"l{handle}", handle=handle, role=True,
                                         snd_settle_mode=rng.choice([0, 1, 2]),
                                         source=Source(address=rng.choice(ADDRESSES), durable=rng.choice([0, 2]),
                                                       dynamic=rng.random() < 0.1)))
        elif kind == 1 and free:
            handle = free.pop(rng.randrange(len(free)))
            senders.append(handle)
            target = Coordinator() if rng.random() < 0.3 else Target(address=rng.choice(ADDRESSES))
            out += client.send(0, Attach(name=f"s{handle}", handle=handle, role=False, target=target,
                                         initial_delivery_count=0))
        elif kind in (2, 3) and (handle := pick(receivers)) is not None:
            out += client.send(0, Flow(incoming_window=1000, next_outgoing_id=delivery_id, outgoing_window=1000,
                                       handle=handle, delivery_count=rng.randrange(3),
                                       link_credit=rng.randrange(20), drain=rng.random() < 0.2,
                                       echo=rng.random() < 0.2))
        elif kind == 4 and (handle := pick(senders)) is not None:
            if rng.random() < 0.3:
                body = AmqpMessage.with_value(Declare() if rng.random() < 0.5 else
                                              Discharge(txn_id=bytes([0, 0, 0, rng.randrange(4)]), fail=rng.random() < 0.5))
            else:
                body = AmqpMessage.with_data(rng.randbytes(rng.choice([0, 10, 5000])))
            state = TransactionalState(txn_id=bytes([0, 0, 0, rng.randrange(4)])) if rng.random() < 0.2 else None
            out += client.send(0, Transfer(handle=handle, delivery_id=delivery_id,
                                           delivery_tag=b"%d" % delivery_id, settled=rng.random() < 0.3, state=state),
                               encode_message(body))
            delivery_id += 1
        elif kind in (5, 6):
            state = rng.choice([Accepted(), Rejected(), Released(), Modified(delivery_failed=True), Modified(), None,
                                TransactionalState(txn_id=bytes([0, 0, 0, rng.randrange(4)]), outcome=Accepted())])
            first = rng.randrange(10)
            out += client.send(0, Disposition(role=True, first=first, last=first + rng.randrange(5),
                                              settled=rng.random() < 0.7, state=state))
        elif kind == 7 and (receivers or senders):
            handles = receivers if receivers and (not senders or rng.random() < 0.5) else senders
            handle = handles.pop(rng.randrange(len(handles)))
            free.append(handle)
            out += client.send(0, Detach(handle=handle, closed=rng.random() < 0.5))
        elif kind == 8 and rng.random() < 0.1:
            out += client.send(0, End())
            break
        elif kind == 9 and rng.random() < 0.05:
            out += client.send(0, Close())
            break
    return out


def closes(data: bytes) -> list:
    client = AmqpConnection(Role.CLIENT)
    client.send_header(0)
    client.send(0, Open(container_id="x"))
    client.receive_data(data)
    found = []
    while (event := client.next_event()) is not NEED_DATA:
        if isinstance(event, Frame) and isinstance(event.performative, (Close, Detach)):
            found.append(event.performative)
    return found


def test_random_performatives_never_break_the_broker(tmp_path):
    async def main() -> None:
        config = BrokerConfig(max_disk_usage=100, data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1,
                              http_port=-1, security_enabled=False)
        async with Broker(config) as broker:
            producer = broker.make_adapter("amqp", Capture())  # something to deliver
            seed_msgs = AmqpConnection(Role.CLIENT)
            data = seed_msgs.send_header(0) + seed_msgs.send(0, Open(container_id="p"))
            data += seed_msgs.send(0, Begin(next_outgoing_id=0, incoming_window=9, outgoing_window=9))
            for h, address in enumerate(["queue://fa", "queue://fb", "topic://ft"]):
                data += seed_msgs.send(0, Attach(name=f"p{h}", handle=h, role=False, target=Target(address=address)))
                for i in range(20):
                    data += seed_msgs.send(0, Transfer(handle=h, delivery_id=h * 100 + i, delivery_tag=b"t", settled=True),
                                           encode_message(AmqpMessage.with_data(b"m%d" % i)))
            producer.data_received(data)
            for seed in range(300):
                rng = random.Random(seed)
                conns = []
                for _ in range(rng.randrange(1, 3)):
                    out = Capture()
                    adapter = broker.make_adapter("amqp", out)
                    adapter.data_received(random_frames(rng))
                    conns.append((adapter, out))
                for _ in range(3):
                    await asyncio.sleep(0)
                for adapter, out in conns:
                    for p in closes(out.data):
                        condition = p.error.condition if p.error is not None else None
                        assert condition != "amqp:internal-error", (seed, p)
                    adapter.connection_lost()
            for _ in range(5):
                await asyncio.sleep(0)
            producer.connection_lost()
            for queue in broker.office.queues.values():
                assert queue.delivering_count == 0, queue
                assert queue.message_count >= 0, queue

    asyncio.run(main())
