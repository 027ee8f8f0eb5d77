"""`ManagementServer`: the management HTTP server inside the broker's own event loop."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from petrel.errors import PetrelError
from petrel.management.app import create_app
from petrel.management.metrics import BrokerMetrics

if TYPE_CHECKING:
    from petrel.server.node import NodeContext

__all__ = ["ManagementServer"]

log = logging.getLogger("petrel.management")


class ManagementServer:
    """Serves ``/api/v1``, ``/health`` and ``/metrics`` for one broker."""

    def __init__(self, broker: NodeContext, *, shutdown_timeout: float = 5.0) -> None:
        self.broker = broker
        self.metrics = BrokerMetrics(broker)
        self.app = create_app(self)
        self.stopping = False
        self.port = -1
        self._closed = False
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout
        )

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0 = any free port); returns the port bound."""
        runner = self._runner
        await runner.setup()
        tls = getattr(self.broker, "tls", None)  # HTTPS with http_ssl_enabled (petrel.server.tls)
        site = web.TCPSite(runner, host, port, reuse_address=True, backlog=128,
                           ssl_context=tls.http_context() if tls is not None else None)
        try:
            await site.start()
        except OSError as exc:
            self._closed = True
            await runner.cleanup()
            raise PetrelError(f"cannot listen on {host}:{port} (http): {exc.strerror}") from None
        self.port = runner.addresses[0][1]
        log.debug("management API on %s:%d", host, self.port)
        return self.port

    async def stop(self, grace: float = 0.0) -> None:
        """Answer /health with 503 from now on; after ``grace`` seconds stop listening.

        Safe to call again (a call with no grace cuts a pending grace period short).
        """
        self.stopping = True
        if grace > 0 and not self._closed:
            await asyncio.sleep(grace)
        if self._closed:
            return
        self._closed = True
        self.metrics.detach()
        await self._runner.cleanup()
