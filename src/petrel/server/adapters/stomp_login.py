"""The STOMP CONNECT's login: ``login`` and ``passcode`` checked off the event loop.

While the credentials are checked (scrypt runs in a thread; a refusal waits
``login_failure_delay``) the connection reads and handles nothing more; then the CONNECT is
handled again, logged in, or the client gets an ERROR frame and the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from petrel.codec.stomp.frames import Frame
from petrel.security.errors import AuthenticationFailed
from petrel.server import tls

if TYPE_CHECKING:
    from petrel.server.adapters.stomp import StompAdapter

__all__ = ["log_in"]

log = logging.getLogger("petrel.server.stomp")


def log_in(adapter: StompAdapter, frame: Frame) -> None:
    """Check the CONNECT frame's credentials, then handle ``frame`` again (or refuse it)."""
    adapter.hold()
    headers = frame.headers
    # (mutual TLS: a client certificate in [security] certificate_users logs in without a login header)
    login = tls.login(adapter.broker.security, adapter.conn, headers.get("login"), headers.get("passcode"))
    task = asyncio.get_running_loop().create_task(login)
    adapter._login_task = task  # a reference until it is done

    def done(task: asyncio.Task) -> None:
        adapter._login_task = None
        if adapter.conn.closed or task.cancelled():
            return
        try:
            subject = task.result()
        except AuthenticationFailed as exc:
            reason = str(exc)
            adapter.resume_held(lambda: adapter.error(reason))
            return
        except Exception as exc:  # never the broker's end
            log.exception("login failed for %s", adapter.conn.peer)
            reason = f"internal error while logging in: {exc}"
            adapter.resume_held(lambda: adapter.error(reason))
            return
        adapter.access.login(subject)
        adapter.resume_held(lambda: adapter.on_connect(frame))

    task.add_done_callback(done)
