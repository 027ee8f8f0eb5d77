"""petrel.server.login.OffLoopLogin with an in-process broker (security on, a users file): the
session is held while the credentials are checked; then the user is logged in and the session
resumes with on_success, or with on_refused / on_error; nothing runs when the login was cancelled
or the connection closed meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time

from petrel.config import BrokerConfig
from petrel.security.config import SecurityModel
from petrel.security.errors import AuthenticationFailed
from petrel.security.users import UserStore
from petrel.server.access import Access
from petrel.server.broker import Broker
from petrel.server.login import OffLoopLogin
from petrel.server.session import ServerSession

log = logging.getLogger("test.login")


class Conn:
    def __init__(self) -> None:
        self.closed = False
        self.peer = "test"
        self.peer_subject = None
        self.transport = None
        self.writing_paused = False

    def write(self, data: bytes) -> None:
        pass

    def close(self, **kw) -> None:
        self.closed = True


def config(tmp_path) -> BrokerConfig:
    users = UserStore(tmp_path / "users.toml")
    users.add("alice", "alice-pw", ["app"])
    users.save()
    return BrokerConfig(max_disk_usage=100, data_dir=tmp_path / "data", host="127.0.0.1", port=0, stomp_port=-1,
                        http_port=-1, security_enabled=True,
                        security=SecurityModel(users_file=tmp_path / "users.toml", login_failure_delay=50))


class Attempt:
    """One OffLoopLogin and what its callbacks saw (and in which order with the session's hold)."""

    def __init__(self, broker: Broker, user: str | None, password: str | None) -> None:
        self.conn = Conn()
        self.access = Access(broker.security)
        self.ran: list = []
        self.session = ServerSession(broker, self.conn, self.access, run=self._run, on_sync_failed=lambda e: None)
        self.login = OffLoopLogin(
            self.session, self.access, broker, self.conn, user, password,
            on_success=lambda: self.ran.append(("success", self.access.user)),
            on_refused=lambda why: self.ran.append(("refused", why)),
            on_error=lambda why: self.ran.append(("error", why)),
            log=log)

    def _run(self, fn) -> None:  # the adapter's run: the held session resumes through it
        self.ran.append(("run", self.session.held))
        fn()

    async def settled(self) -> None:
        deadline = time.monotonic() + 10
        while self.login.pending:
            assert time.monotonic() < deadline, "the login never finished"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)


def run(tmp_path, body) -> None:
    async def main() -> None:
        async with Broker(config(tmp_path)) as broker:
            await body(broker)
    asyncio.run(main())


def test_a_good_password_logs_the_user_in_and_resumes_with_on_success(tmp_path):
    async def body(broker):
        a = Attempt(broker, "alice", "alice-pw")
        assert a.session.held and a.login.pending and a.ran == []
        await a.settled()
        assert a.ran == [("run", False), ("success", "alice")]
        assert not a.session.held

    run(tmp_path, body)


def test_a_wrong_password_resumes_with_on_refused_and_logs_nobody_in(tmp_path):
    async def body(broker):
        a = Attempt(broker, "alice", "wrong")
        await a.settled()
        assert len(a.ran) == 2 and a.ran[0] == ("run", False) and a.ran[1][0] == "refused"
        assert a.ran[1][1]  # the reason, as the security layer gives it
        assert a.access.subject is None and not a.session.held

    run(tmp_path, body)


def test_a_check_that_fails_resumes_with_on_error(tmp_path, monkeypatch):
    async def broken(user, password, remote=""):
        raise RuntimeError("users store on fire")

    async def body(broker):
        monkeypatch.setattr(broker.security, "login_async", broken)
        a = Attempt(broker, "alice", "alice-pw")
        await a.settled()
        assert a.ran == [("run", False), ("error", "internal error while logging in: users store on fire")]
        assert a.access.subject is None

    run(tmp_path, body)


def test_cancelled_before_it_completes_nothing_runs(tmp_path):
    async def body(broker):
        a = Attempt(broker, "alice", "wrong")  # a refusal waits login_failure_delay: time to cancel
        a.login.cancel()
        await a.settled()
        await asyncio.sleep(0.1)  # past the failure delay
        assert a.ran == [] and a.access.subject is None
        assert a.session.held  # the connection is going: nobody resumes it

    run(tmp_path, body)


def test_a_connection_closed_meanwhile_gets_no_outcome(tmp_path):
    async def body(broker):
        for password in ("alice-pw", "wrong"):
            a = Attempt(broker, "alice", password)
            a.conn.closed = True
            await a.settled()
            assert a.ran == [] and a.access.subject is None

    run(tmp_path, body)


def test_the_refusal_is_the_security_layers_authentication_failure(tmp_path):
    """What on_refused gets is AuthenticationFailed's text (the reason adapters send on)."""
    async def body(broker):
        try:
            await broker.security.login_async("alice", "wrong", "test")
        except AuthenticationFailed as exc:
            expected = str(exc)
        a = Attempt(broker, "alice", "wrong")
        await a.settled()
        assert a.ran[-1] == ("refused", expected)

    run(tmp_path, body)
