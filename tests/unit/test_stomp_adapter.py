"""The STOMP adapter's rendering of MESSAGE frames, checked by parsing them with the client codec."""

from __future__ import annotations

import asyncio

import pytest

from petrel.codec.stomp import NEED_DATA, Frame, Role, StompConnection
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


def frames_of(data: bytes, version: str) -> list[Frame]:
    client = StompConnection(Role.CLIENT)
    client.send(Frame("CONNECT", {"accept-version": version, "host": "x"}))
    client.receive_data(data)
    out = []
    while (event := client.next_event()) is not NEED_DATA:
        if isinstance(event, Frame):
            out.append(event)
    return out


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_message_headers_round_trip_with_special_characters(tmp_path, version):
    async def main():
        config = BrokerConfig(max_disk_usage=100, data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1, http_port=-1,
                              security_enabled=False)
        async with Broker(config) as broker:
            out = Capture()
            consumer = broker.make_adapter("stomp", out)
            consumer.data_received(
                f"CONNECT\naccept-version:{version}\n\n\x00SUBSCRIBE\nid:s:1\ndestination:/queue/q\nack:client\n\n\x00"
                .encode()
                if version == "1.0"
                else f"CONNECT\naccept-version:{version}\n\n\x00SUBSCRIBE\nid:s\\c1\ndestination:/queue/q\n"
                "ack:client\n\n\x00".encode()
            )
            producer = broker.make_adapter("stomp", Capture())
            send_headers = "plain:value\ncolon:a\\cb\n" if version != "1.0" else "plain:value\n"
            producer.data_received(
                f"CONNECT\naccept-version:{version}\n\n\x00SEND\ndestination:/queue/q\n{send_headers}"
                "subscription:spoofed\n\nbody\x00".encode()
            )
            for _ in range(5):
                await asyncio.sleep(0)
            return out.data

    data = asyncio.run(main())
    frames = frames_of(data, version)
    message = next(f for f in frames if f.command == "MESSAGE")
    assert message.body == b"body"
    assert message.headers["plain"] == "value"
    assert message.headers["subscription"] == "s:1"  # ours, not the spoofed property
    assert message.headers["destination"] == "/queue/q"
    if version != "1.0":
        assert message.headers["colon"] == "a:b"
    if version == "1.2":
        assert message.headers["ack"] == message.headers["message-id"]
