"""A deactivated broker lists none of its acceptors in `broker.ports` (an HA backup that gave
way, a drainer, management's view of a stopped broker): every protocol's own acceptor, the
all-protocols one and the WebSocket one are gone, and the management port stays."""

from __future__ import annotations

import asyncio

import petrel
from petrel.server import protocols


def test_deactivate_clears_every_acceptor_port(tmp_path):
    own = {spec.port_setting: 0 for spec in protocols.PROTOCOLS if spec.port_setting}

    async def main():
        b = petrel.Broker(data_dir=tmp_path, host="127.0.0.1", port=0, http_port=0, ws_port=0,
                          http_host="127.0.0.1", security_enabled=False, **own)
        await b.start()
        try:
            opened = set(b.ports)
            acceptor_names = {name for name, _, _ in protocols.acceptors(b.config)}
            assert acceptor_names == {"all"} | {spec.name for spec in protocols.PROTOCOLS if spec.port_setting}
            assert opened == acceptor_names | {"ws", "http"}
            await b.deactivate()
            assert b.ports == {"http": b.ports.get("http")} and b.ports["http"] > 0, b.ports
        finally:
            await b.stop()

    asyncio.run(main())
