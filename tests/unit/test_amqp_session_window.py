"""The AMQP adapter in-process: deliveries respect the client's session incoming-window as well
as its link credit, and go on when a session flow opens the window again."""

from __future__ import annotations

import asyncio

from petrel.codec.amqp import NEED_DATA, AmqpConnection, Frame
from petrel.codec.amqp.message import AmqpMessage, encode_message
from petrel.codec.amqp.performatives import Attach, Begin, Flow, Open, Source, Target, Transfer
from petrel.codec.roles import Role
from petrel.config import BrokerConfig
from petrel.server.broker import Broker


class Capture:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False
        self.writing_paused = False
        self.peer = "test"
        self.transport = None

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self, **kw) -> None:
        self.closed = True

    def call_later(self, delay, fn):
        return asyncio.get_running_loop().call_later(delay, fn)


def performatives(client: AmqpConnection, out: Capture, kind: type) -> list:
    """The performatives of `kind` in what the broker wrote to `out` since the last call."""
    client.receive_data(out.data)
    out.data = b""
    got = []
    while (event := client.next_event()) is not NEED_DATA:
        if isinstance(event, Frame) and isinstance(event.performative, kind):
            got.append(event.performative)
    return got


def transfers(client: AmqpConnection, out: Capture) -> list[Transfer]:
    return performatives(client, out, Transfer)


def test_the_session_window_holds_deliveries_until_a_flow_opens_it(tmp_path):
    async def main() -> None:
        config = BrokerConfig(max_disk_usage=100, data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1,
                              http_port=-1, security_enabled=False)
        async with Broker(config) as broker:
            producer = AmqpConnection(Role.CLIENT)
            data = producer.send_header(0) + producer.send(0, Open(container_id="p"))
            data += producer.send(0, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))
            data += producer.send(0, Attach(name="p", handle=0, role=False, target=Target(address="queue://w")))
            for i in range(6):
                data += producer.send(0, Transfer(handle=0, delivery_id=i, delivery_tag=b"t", settled=True),
                                      encode_message(AmqpMessage.with_data(b"m%d" % i)))
            broker.make_adapter("amqp", Capture()).data_received(data)

            client, out = AmqpConnection(Role.CLIENT), Capture()
            consumer = broker.make_adapter("amqp", out)
            data = client.send_header(0) + client.send(0, Open(container_id="c"))
            data += client.send(0, Begin(next_outgoing_id=0, incoming_window=2, outgoing_window=100))
            data += client.send(0, Attach(name="r", handle=0, role=True, snd_settle_mode=1,
                                          source=Source(address="queue://w")))
            data += client.send(0, Flow(next_incoming_id=0, incoming_window=2, next_outgoing_id=0, outgoing_window=100,
                                        handle=0, delivery_count=0, link_credit=10))
            consumer.data_received(data)
            await asyncio.sleep(0)
            assert [t.delivery_id for t in transfers(client, out)] == [0, 1]  # credit 10, window 2
            consumer.data_received(client.send(0, Flow(next_incoming_id=2, incoming_window=3, next_outgoing_id=0,
                                                       outgoing_window=100)))
            await asyncio.sleep(0)
            assert [t.delivery_id for t in transfers(client, out)] == [2, 3, 4]
            consumer.data_received(client.send(0, Flow(next_incoming_id=5, incoming_window=10, next_outgoing_id=0,
                                                       outgoing_window=100)))
            await asyncio.sleep(0)
            assert [t.delivery_id for t in transfers(client, out)] == [5]  # all there is
            consumer.connection_lost()

    asyncio.run(main())
