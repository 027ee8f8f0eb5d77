"""The aiohttp application keys through which handlers reach the broker and the server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from petrel.management.auth import Tokens
    from petrel.management.server import ManagementServer
    from petrel.server.node import NodeContext

BROKER: web.AppKey[NodeContext] = web.AppKey("petrel.broker")
SERVER: web.AppKey[ManagementServer] = web.AppKey("petrel.management")
TOKENS: web.AppKey[Tokens] = web.AppKey("petrel.tokens")
