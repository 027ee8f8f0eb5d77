"""`petrel user add|list|rm|reset` and `petrel create`'s administrator, as real commands, with a
real broker (security on, as a product install) that sees the changes at the next login."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import stomp
from stomp.exception import ConnectFailedException

from cli_process import command, environment, ok, petrel
from conftest import Listener
from petrel.testing.process import free_port, wait_for

pytestmark = pytest.mark.system

ports: dict[int, int] = {}  # a running broker's STOMP port -> its all-protocols port
GENERATED = re.compile(r"Administrator 'admin', password '([^']+)' \(shown only this once")


@contextmanager
def broker(instance: Path) -> Iterator[int]:
    """``petrel run`` of the instance, security as the product has it; yields its STOMP port
    (`ports` maps it to its all-protocols port)."""
    stomp_port = free_port()
    while True:
        all_port = free_port()
        if all_port != stomp_port:
            break
    ports[stomp_port] = all_port
    env = {k: v for k, v in environment().items() if k != "PETREL_SECURITY_ENABLED"}
    log = (instance / "run.log").open("ab")
    proc = subprocess.Popen(command("run", "--config", str(instance / "broker.toml"), "--host", "127.0.0.1",
                                    "--port", str(all_port), "--stomp-port", str(stomp_port), "--http-port", "-1"),
                            stdout=log, stderr=subprocess.STDOUT, env=env)

    def up() -> bool:
        assert proc.poll() is None, (instance / "run.log").read_text()
        try:
            socket.create_connection(("127.0.0.1", stomp_port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        wait_for(up, 60)
        yield stomp_port
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def stomp_send(port: int, user: str | None, password: str | None, destination: str = "/queue/q") -> str:
    """"ok" or the ERROR's message for a SEND with a receipt; raises ConnectFailedException."""
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect(user, password, wait=True)
    try:
        conn.send(destination, b"x", headers={"receipt": "r1"})

        def answered() -> str | None:
            if not listener.receipts.empty():
                return "ok"
            if not listener.errors.empty():
                return listener.errors.get().headers["message"]
            return None

        return wait_for(answered, 10)
    finally:
        if conn.is_connected():
            conn.disconnect()


def test_create_writes_an_admin_and_user_manages_the_users_of_a_running_broker(tmp_path: Path) -> None:
    instance = tmp_path / "inst"
    out = ok("create", str(instance))
    password = GENERATED.search(out).group(1)
    config = str(instance / "broker.toml")
    assert "admin" in ok("user", "list", "--config", config)
    with broker(instance) as port:
        assert stomp_send(port, "admin", password) == "ok"
        with pytest.raises(ConnectFailedException):
            stomp_send(port, None, None)  # no anonymous access
        # a user added while the broker runs logs in at once; its role has no permission yet
        assert "added user 'app' with roles app, audit" in ok("user", "add", "app", "--password", "app-pw",
                                                              "--role", "app", "--role", "audit", "--config", config)
        assert stomp_send(port, "app", "app-pw") == "user 'app' lacks permission 'send' on address 'q'"
        listed = ok("user", "list", "--config", config)
        assert re.search(r"\| app\s+\| app,audit", listed) and re.search(r"\| admin\s+\| admin", listed)
        # a new password and role
        ok("user", "reset", "app", "--password", "app-pw2", "--role", "admin", "--config", config)
        with pytest.raises(ConnectFailedException):
            stomp_send(port, "app", "app-pw")
        assert stomp_send(port, "app", "app-pw2") == "ok"
        ok("user", "rm", "app", "--config", config)
        with pytest.raises(ConnectFailedException):
            stomp_send(port, "app", "app-pw2")
    assert "created the users file" not in (instance / "run.log").read_text()  # petrel create wrote it


def test_create_with_a_given_admin_and_the_client_commands_log_in(tmp_path: Path) -> None:
    instance = tmp_path / "inst"
    out = ok("create", str(instance), "--user", "ops", "--password", "ops-pw")
    assert "ops-pw" not in out and "Administrator 'ops' with the password given" in out
    with broker(instance) as port:
        assert stomp_send(port, "ops", "ops-pw") == "ok"
        core = f"tcp://127.0.0.1:{ports[port]}"
        stomp_url = f"tcp://127.0.0.1:{port}"
        ok("producer", "--url", core, "--user", "ops", "--password", "ops-pw", "--destination", "queue://cli",
           "--message-count", "5")
        ok("producer", "--url", stomp_url, "--protocol", "stomp", "--user", "ops", "--password", "ops-pw",
           "--destination", "queue://cli", "--message-count", "5")
        out = ok("consumer", "--url", core, "--user", "ops", "--password", "ops-pw", "--destination", "queue://cli",
                 "--message-count", "10", "--receive-timeout", "5000")
        assert re.findall(r"Consumed: (\d+) messages", out) == ["10"]
        refused = petrel("producer", "--url", core, "--user", "ops", "--password", "wrong", "--destination",
                         "queue://cli", "--message-count", "1")
        assert refused.returncode == 1 and "login refused: invalid user or password" in refused.stderr
        assert refused.stderr.startswith("petrel: error: ") and refused.stderr.count("\n") == 1


def test_create_allow_anonymous(tmp_path: Path) -> None:
    instance = tmp_path / "inst"
    out = ok("create", str(instance), "--allow-anonymous")
    assert "Anonymous clients may do everything" in out
    assert not (instance / "data" / "users.toml").exists()
    with broker(instance) as port:
        assert stomp_send(port, None, None, "/queue/anything.at.all") == "ok"
    # the broker made its administrator on first start; admin keeps every permission too
    line = next(x for x in (instance / "run.log").read_text().splitlines() if "created the users file" in x)
    password = line.split('password "')[1].split('"')[0]
    with broker(instance) as port:
        assert stomp_send(port, "admin", password) == "ok"


def test_user_file_option_and_errors(tmp_path: Path) -> None:
    users = str(tmp_path / "etc" / "users.toml")
    ok("user", "add", "alice", "--password", "pw", "--role", "app", "--user-file", users)
    assert "alice" in ok("user", "list", "alice", "--user-file", users)
    cases = [
        (["user", "add", "alice", "--password", "pw", "--role", "app", "--user-file", users], 2, "already exists"),
        (["user", "add", "bob", "--password", "pw", "--role", "$internal", "--user-file", users], 2, "not a role name"),
        (["user", "add", "bob", "--password", "pw", "--user-file", users], 2, "--role"),
        (["user", "rm", "nobody", "--user-file", users], 1, "no user 'nobody'"),
        (["user", "reset", "nobody", "--password", "x", "--user-file", users], 1, "no user 'nobody'"),
        (["user", "list", "--user-file", users, "--config", users], 2, "not both"),
    ]
    for args, code, message in cases:
        result = petrel(*args)
        assert result.returncode == code, (args, result.stderr)
        assert result.stderr.startswith("petrel: error: ") and message in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1
    (tmp_path / "bad.toml").write_text("[users.x\n")
    result = petrel("user", "list", "--user-file", str(tmp_path / "bad.toml"))
    assert result.returncode == 2 and "invalid TOML" in result.stderr


def test_a_prompted_password(tmp_path: Path) -> None:
    users = str(tmp_path / "users.toml")
    result = subprocess.run(command("user", "add", "carol", "--role", "app", "--user-file", users),
                            input="secret\nsecret\n", capture_output=True, text=True, env=environment(), timeout=60)
    assert result.returncode == 0, result.stderr
    from petrel.security.users import UserStore

    assert UserStore.load(users).authenticate("carol", "secret") is not None
