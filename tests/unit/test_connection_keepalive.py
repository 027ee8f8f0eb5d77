"""Every accepted socket has TCP keepalive, so a client whose host died (no FIN, no RST) is
found and its consumers' unacknowledged messages go back to their queues."""

from __future__ import annotations

import asyncio
import socket

import petrel
from petrel.server.connection import KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES


def test_accepted_sockets_probe_a_silent_peer(tmp_path):
    async def main():
        async with petrel.Broker(data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1, http_port=-1) as b:
            loop = asyncio.get_running_loop()
            client = await loop.run_in_executor(
                None, lambda: socket.create_connection(("127.0.0.1", b.ports["all"]), timeout=10))
            try:
                deadline = loop.time() + 10
                while not b.connections and loop.time() < deadline:
                    await asyncio.sleep(0.01)
                (conn,) = b.connections
                sock = conn.transport.get_extra_info("socket")
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                if hasattr(socket, "TCP_KEEPIDLE"):
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_PROBES
            finally:
                client.close()

    asyncio.run(main())
