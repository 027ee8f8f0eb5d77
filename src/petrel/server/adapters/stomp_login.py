"""The STOMP CONNECT's login: ``login`` and ``passcode`` checked off the event loop.

While the credentials are checked (scrypt runs in a thread; a refusal waits
``login_failure_delay``) the connection reads and handles nothing more; then the CONNECT is
handled again, logged in, or the client gets an ERROR frame and the connection closes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from petrel.codec.stomp.frames import Frame
from petrel.server.login import OffLoopLogin

if TYPE_CHECKING:
    from petrel.server.adapters.stomp import StompAdapter

__all__ = ["log_in"]

log = logging.getLogger("petrel.server.stomp")


def log_in(adapter: StompAdapter, frame: Frame) -> None:
    """Check the CONNECT frame's credentials, then handle ``frame`` again (or refuse it)."""
    headers = frame.headers
    # (mutual TLS: a client certificate in [security] certificate_users logs in without a login header)
    adapter._login_task = OffLoopLogin(
        adapter.session, adapter.access, adapter.broker, adapter.conn, headers.get("login"), headers.get("passcode"),
        on_success=lambda: adapter.on_connect(frame),
        on_refused=adapter.error,
        log=log)
