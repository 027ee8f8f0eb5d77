"""The aiohttp application keys through which handlers reach the broker and the server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from petrel.management.server import ManagementServer
    from petrel.server.broker import Broker

BROKER: web.AppKey[Broker] = web.AppKey("petrel.broker")
SERVER: web.AppKey[ManagementServer] = web.AppKey("petrel.management")
