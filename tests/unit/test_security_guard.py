"""`Security`: logins (users, anonymous, cluster, certificates), checks with audit lines, the first admin."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from petrel.config import BrokerConfig
from petrel.security import INTERNAL, AuthenticationFailed, NotAuthorized, Security, Subject, UserStore


def store(tmp_path: Path, **users: tuple[str, list[str]]) -> UserStore:
    s = UserStore(tmp_path / "users.toml")
    for name, (password, roles) in users.items():
        s.add(name, password, roles)
    s.save()
    return s


def test_login_with_a_user_and_password(tmp_path: Path) -> None:
    sec = Security(users=store(tmp_path, alice=("pw", ["app"])))
    assert sec.login("alice", "pw", "1.2.3.4:5") == Subject("alice", frozenset({"app"}), "1.2.3.4:5")
    for user, password in [("alice", "bad"), ("alice", None), ("bob", "pw")]:
        with pytest.raises(AuthenticationFailed, match="invalid user or password"):
            sec.login(user, password, "r")


def test_anonymous_refused_by_default_and_allowed_with_its_role(tmp_path: Path) -> None:
    sec = Security(users=store(tmp_path))
    for user in (None, ""):
        with pytest.raises(AuthenticationFailed, match="anonymous access is not allowed"):
            sec.login(user, None, "r")
    open_sec = Security(users=store(tmp_path), allow_anonymous=True, anonymous_role="guest",
                        settings={"public.#": {"send": ["guest"]}})
    guest = open_sec.login(None, None, "r")
    assert guest == Subject(None, frozenset({"guest"}), "r") and guest.name == "<anonymous>"
    open_sec.check(guest, "send", "public.news")
    with pytest.raises(NotAuthorized):
        open_sec.check(guest, "consume", "public.news")


def test_cluster_credentials_are_internal_unless_the_password_is_the_default(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path, cluster_password="s3cret-cluster")
    sec = Security.from_config(config)
    subject = sec.login(config.cluster_user, "s3cret-cluster", "peer")
    assert subject.internal and subject.remote == "peer" and sec.is_internal(subject)
    with pytest.raises(AuthenticationFailed):
        sec.login(config.cluster_user, "guess", "peer")
    default = Security.from_config(BrokerConfig(data_dir=tmp_path))
    with pytest.raises(AuthenticationFailed, match="cluster_password is the well-known default"):
        default.login(config.cluster_user, config.cluster_password, "peer")
    assert not sec.is_internal(Subject("admin", frozenset({"admin"})))
    assert INTERNAL.internal


def test_check_raises_and_writes_an_audit_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sec = Security(users=store(tmp_path), settings={"orders.#": {"send": ["app"]}})
    app = Subject("alice", frozenset({"app"}), "10.0.0.1:4000")
    sec.check(app, "send", "orders.eu")
    with caplog.at_level(logging.INFO, logger="petrel.audit"):
        with pytest.raises(NotAuthorized) as info:
            sec.check(app, "consume", "orders.eu")
    assert str(info.value) == "user 'alice' lacks permission 'consume' on address 'orders.eu'"
    assert (info.value.permission, info.value.address, info.value.user) == ("consume", "orders.eu", "alice")
    lines = [r.getMessage() for r in caplog.records if r.name == "petrel.audit"]
    assert lines == ["user=alice remote=10.0.0.1:4000 action=consume address=orders.eu result=refused"]


def test_failed_logins_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sec = Security(users=store(tmp_path, alice=("pw", [])))
    with caplog.at_level(logging.INFO):
        with pytest.raises(AuthenticationFailed):
            sec.login("alice", "wrong", "10.0.0.2:1")
    text = caplog.text
    assert "login refused for 'alice' from 10.0.0.2:1: invalid user or password" in text
    assert "user=alice remote=10.0.0.2:1 action=login result=refused" in text
    assert "wrong" not in "".join(r.getMessage() for r in caplog.records)  # no password in the logs


def test_login_async_is_slowed_only_on_failure(tmp_path: Path) -> None:
    sec = Security(users=store(tmp_path, alice=("pw", [])), login_failure_delay=0.3)

    async def main() -> tuple[float, float, int]:
        ticks = 0
        stop = False

        async def ticker() -> None:  # the loop keeps running while a login waits
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        t0 = time.monotonic()
        await sec.login_async("alice", "pw", "r")
        ok = time.monotonic() - t0
        t0 = time.monotonic()
        with pytest.raises(AuthenticationFailed):
            await sec.login_async("alice", "bad", "r")
        failed = time.monotonic() - t0
        stop = True
        await task
        return ok, failed, ticks

    ok, failed, ticks = asyncio.run(main())
    assert failed >= 0.3 and ok < 0.3
    assert ticks >= 10


def test_disabled_security_lets_everything_through(tmp_path: Path) -> None:
    sec = Security.from_config(BrokerConfig(data_dir=tmp_path, security_enabled=False))
    subject = sec.login("whoever", "whatever", "r")
    sec.check(subject, "deleteAddress", "x")
    assert sec.is_internal(subject) and sec.prepare() is None
    assert not (tmp_path / "users.toml").exists()


def test_prepare_creates_the_admin_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                        capsys: pytest.CaptureFixture) -> None:
    sec = Security.from_config(BrokerConfig(data_dir=tmp_path / "data"))
    with caplog.at_level(logging.INFO, logger="petrel.security"):
        password = sec.prepare()
    assert password and len(password) >= 16
    assert caplog.text.count(password) == 1 and 'user "admin"' in caplog.text and "users.toml" in caplog.text
    assert capsys.readouterr().err.count(password) <= 1
    admin = sec.login("admin", password, "r")
    assert admin.roles == frozenset({"admin"})
    sec.check(admin, "manage", "anything")
    assert password not in (tmp_path / "data" / "users.toml").read_text()
    again = Security.from_config(BrokerConfig(data_dir=tmp_path / "data"))
    assert again.prepare() is None and capsys.readouterr().err == ""
    assert again.login("admin", password, "r").user == "admin"


def test_prepare_shows_the_password_when_the_log_hides_warnings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    logger = logging.getLogger("petrel.security")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        password = Security.from_config(BrokerConfig(data_dir=tmp_path)).prepare()
    finally:
        logger.setLevel(level)
    assert capsys.readouterr().err.count(password) == 1


def test_certificate_users_map_to_users_file_roles(tmp_path: Path) -> None:
    sec = Security(users=store(tmp_path, app1=("pw", ["app"])),
                   certificate_users={"CN=app1, O=Example": "app1", "CN=ghost": "ghost"})
    assert sec.login_certificate("CN=app1,O=Example", "r") == Subject("app1", frozenset({"app"}), "r")
    with pytest.raises(AuthenticationFailed, match="no user is mapped"):
        sec.login_certificate("CN=other", "r")
    with pytest.raises(AuthenticationFailed, match="not in the users file"):
        sec.login_certificate("CN=ghost", "r")


def test_a_broken_users_file_refuses_logins_not_the_broker(tmp_path: Path) -> None:
    users = store(tmp_path, alice=("pw", []))
    sec = Security(users=UserStore.load(users.path))
    users.path.write_text("[users.alice\n")
    with pytest.raises(AuthenticationFailed, match="cannot read its users file"):
        sec.login("alice", "pw", "r")
