"""Petrel embedded in an application: the asyncio form and the synchronous twin."""

from __future__ import annotations

import asyncio
import socket

import petrel


def stomp_roundtrip(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"CONNECT\naccept-version:1.2\n\n\x00")
        s.sendall(b"SEND\ndestination:/queue/e\npersistent:true\nk:2\n\nkeep\x00"
                  b"SEND\ndestination:/queue/e\nk:1\n\nhi\x00"
                  b"SUBSCRIBE\nid:1\ndestination:/queue/e\nselector:k = '1'\n\n\x00")
        data = b""
        while b"hi\x00" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


def test_async_broker_context_manager(tmp_path):
    async def main():
        async with petrel.Broker(data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1, http_port=-1,
                                 security_enabled=False) as b:
            port = b.ports["all"]
            data = await asyncio.get_running_loop().run_in_executor(None, stomp_roundtrip, port)
            assert b"MESSAGE" in data and data.endswith(b"hi\x00")
            assert b.office.queues["e"].messages_added == 2

    asyncio.run(main())


def test_sync_embedded_broker(tmp_path):
    with petrel.EmbeddedBroker(data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1, http_port=-1,
                               security_enabled=False) as b:
        data = stomp_roundtrip(b.ports["all"])
        assert data.endswith(b"hi\x00")
        assert b.call(lambda: b.broker.office.queues["e"].messages_added) == 2
    # the data directory is released: a second broker can open it
    with petrel.EmbeddedBroker(data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1, http_port=-1,
                               security_enabled=False) as b2:
        assert "e" in b2.call(lambda: list(b2.broker.office.queues))
