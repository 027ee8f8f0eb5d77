"""A connection's login checked off the event loop, the same way for every protocol adapter.

The credentials are checked by `petrel.server.tls.login` (scrypt runs in a thread; a refusal
waits ``login_failure_delay``). Meanwhile the connection's session is held: it reads and
handles nothing more. Once the check is done the held session resumes with the outcome: the
user logged in and ``on_success()``, or ``on_refused(why)`` for wrong credentials, or
``on_error(why)`` when the check itself failed. Each adapter's callbacks say it in its own
protocol (a CONNACK code, a SASL outcome, an ExceptionResponse, an ERROR frame). Nothing
happens when the connection closed meanwhile or the login was cancelled (`OffLoopLogin.cancel`,
which the adapter calls when the connection is lost).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

from petrel.security.errors import AuthenticationFailed
from petrel.server import tls

if TYPE_CHECKING:
    from petrel.server.access import Access
    from petrel.server.broker import Broker
    from petrel.server.session import ServerSession

__all__ = ["OffLoopLogin"]


class OffLoopLogin:
    """One login under way; `cancel` it when the connection goes first."""

    __slots__ = ("_task",)

    def __init__(
        self,
        session: ServerSession,
        access: Access,
        broker: Broker,
        conn,
        user: str | None,
        password: str | None,
        *,
        on_success: Callable[[], None],
        on_refused: Callable[[str], None],
        on_error: Callable[[str], None] | None = None,
        log: logging.Logger,
    ) -> None:
        session.hold()
        task = asyncio.get_running_loop().create_task(tls.login(broker.security, conn, user, password))
        self._task: asyncio.Task | None = task  # a reference until it is done
        failed = on_error if on_error is not None else on_refused

        def done(task: asyncio.Task) -> None:
            self._task = None
            if conn.closed or task.cancelled():
                return
            try:
                subject = task.result()
            except AuthenticationFailed as exc:
                why = str(exc)
                session.resume_held(lambda: on_refused(why))
                return
            except Exception as exc:  # never the broker's end
                log.exception("login failed for %s", conn.peer)
                why = f"internal error while logging in: {exc}"
                session.resume_held(lambda: failed(why))
                return
            access.login(subject)  # before resuming: what the session handles next is the user's
            session.resume_held(on_success)

        task.add_done_callback(done)

    @property
    def pending(self) -> bool:
        """The check is still under way."""
        return self._task is not None

    def cancel(self) -> None:
        """Drop the login (the connection is gone): no callback runs."""
        if self._task is not None:
            self._task.cancel()
