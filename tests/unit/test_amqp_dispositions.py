"""The AMQP adapter in-process: the transfers of one read that are accepted one after another
share one disposition (first..last), a refusal between them splits the run and keeps its place,
and every delivery id is answered exactly once."""

from __future__ import annotations

import asyncio
import time

from petrel.codec.amqp import AmqpConnection
from petrel.codec.amqp.message import AmqpMessage, encode_message
from petrel.codec.amqp.performatives import (
    Accepted, Attach, Begin, Disposition, Header, Open, Rejected, Target, Transfer,
)
from petrel.codec.roles import Role
from petrel.config import BrokerConfig
from petrel.server.broker import Broker

from test_amqp_session_window import Capture, performatives


def test_accepted_transfers_of_one_read_share_a_disposition(tmp_path):
    async def main() -> None:
        config = BrokerConfig(max_disk_usage=100, data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1,
                              http_port=-1, security_enabled=False)
        async with Broker(config) as broker:
            client, out = AmqpConnection(Role.CLIENT), Capture()
            data = client.send_header(0) + client.send(0, Open(container_id="p"))
            data += client.send(0, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))
            data += client.send(0, Attach(name="d", handle=0, role=False, target=Target(address="queue://d")))
            data += client.send(0, Attach(name="relay", handle=1, role=False, target=Target()))
            durable = encode_message(AmqpMessage.with_data(b"m", header=Header(durable=True)))
            plain = encode_message(AmqpMessage.with_data(b"m"))
            # ids 0-2 accepted (durable and not), 3 refused (the relay needs properties.to), 4-5 accepted,
            # 6 pre-settled (no disposition), 7 accepted
            for i, handle, payload, settled in ((0, 0, durable, False), (1, 0, plain, False), (2, 0, durable, False),
                                                (3, 1, plain, False), (4, 0, durable, False), (5, 0, plain, False),
                                                (6, 0, durable, True), (7, 0, durable, False)):
                data += client.send(0, Transfer(handle=handle, delivery_id=i, delivery_tag=b"t%d" % i,
                                                settled=settled), payload)
            broker.make_adapter("amqp", out).data_received(data)
            got: list[Disposition] = []
            deadline = time.monotonic() + 10
            while sum((d.last if d.last is not None else d.first) - d.first + 1 for d in got) < 7:
                assert time.monotonic() < deadline, got
                await asyncio.sleep(0.01)
                got += performatives(client, out, Disposition)
            ranges = [(int(d.first), None if d.last is None else int(d.last), type(d.state).__name__) for d in got]
            assert ranges == [(0, 2, "Accepted"), (3, None, "Rejected"), (4, 5, "Accepted"), (7, None, "Accepted")]
            assert all(d.settled and d.role for d in got)
            assert isinstance(got[0].state, Accepted) and isinstance(got[1].state, Rejected)
            assert broker.office.queues["d"].message_count == 7

    asyncio.run(main())
