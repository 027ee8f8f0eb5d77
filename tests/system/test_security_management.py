"""The management API of a real `petrel run` with security on (issue 13): HTTP basic and bearer
tokens against the broker's users, view for reads and manage for changes per address, /health
open, /metrics behind view unless opened, cross-site requests refused, the CLI's --user and
--password, and the API listening on 127.0.0.1 unless opened."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess

USERS = {"admin": ("admin-pw", ["admin"]), "viewer": ("viewer-pw", ["viewer"]),
         "orders": ("orders-pw", ["orders"])}
SETTINGS = """
[security]
login_failure_delay = 50
users_file = "{users}"

[security_settings."#"]
view = ["admin", "viewer"]
manage = ["admin"]

[security_settings."orders.#"]
view = ["admin", "viewer", "orders"]
manage = ["admin", "orders"]
send = ["admin"]
"""


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def call(b: BrokerProcess, method: str, path: str, body: object = None, *, auth: str | None = None,
         headers: dict | None = None, raw: bytes | None = None) -> tuple[int, dict, dict]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {"Content-Type": "application/json"} if method != "GET" else {}
    if auth:
        hdrs["Authorization"] = auth
    hdrs.update(headers or {})
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}{path}", data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, text, got = resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as exc:
        status, text, got = exc.code, exc.read(), exc.headers
    try:
        payload = json.loads(text)
    except ValueError:
        payload = {"text": text.decode(errors="replace")}
    return status, payload, got


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("secmgmt")
    users = UserStore(work / "users.toml")
    for name, (password, roles) in USERS.items():
        users.add(name, password, roles)
    users.save()
    b = BrokerProcess(work / "b", http=True, env=OWN_SECURITY, settings=SETTINGS.format(users=work / "users.toml"))
    b.start()
    yield b
    b.kill9()


ADMIN = basic("admin", "admin-pw")
VIEWER = basic("viewer", "viewer-pw")
ORDERS = basic("orders", "orders-pw")


def test_health_stays_open_and_everything_else_asks_for_credentials(broker):
    status, body, _ = call(broker, "GET", "/health")
    assert status == 200 and body["status"] == "ok"
    for method, path in (("GET", "/api/v1/queues"), ("GET", "/api/v1/broker"), ("GET", "/metrics"),
                         ("POST", "/api/v1/queues"), ("DELETE", "/api/v1/queues/DLQ"), ("GET", "/api/v1/ha")):
        status, body, headers = call(broker, method, path, {"name": "x"} if method == "POST" else None)
        assert status == 401, (method, path, status, body)
        assert "authentication required" in body["error"] and "--user" in body["error"]
        challenges = headers.get_all("WWW-Authenticate")
        assert any(c.startswith("Basic ") for c in challenges) and any(c.startswith("Bearer") for c in challenges)


def test_wrong_or_malformed_credentials_are_401(broker):
    for auth in (basic("admin", "wrong"), basic("nobody", "x"), "Basic !!!notbase64", "Basic " +
                 base64.b64encode(b"no-colon").decode(), "Digest abc", "Bearer not-a-token"):
        status, body, headers = call(broker, "GET", "/api/v1/queues", auth=auth)
        assert status == 401, (auth, status, body)
        assert headers.get("WWW-Authenticate")
    assert "admin-pw" not in broker.log() and "login refused" in broker.log()


def test_view_reads_and_manage_changes_per_address(broker):
    assert call(broker, "GET", "/api/v1/queues", auth=VIEWER)[0] == 200
    assert call(broker, "GET", "/api/v1/broker", auth=VIEWER)[0] == 200
    status, body, _ = call(broker, "POST", "/api/v1/queues", {"name": "general.q"}, auth=VIEWER)
    assert status == 403 and "'manage'" in body["error"] and "viewer" in body["error"]
    assert call(broker, "POST", "/api/v1/queues", {"name": "general.q"}, auth=ADMIN)[0] == 201
    # the orders user manages orders.# only: its queues, not the others
    assert call(broker, "POST", "/api/v1/queues/orders.in/purge", {}, auth=ORDERS)[0] == 404  # allowed, none yet
    assert call(broker, "POST", "/api/v1/queues", {"name": "orders.in"}, auth=ADMIN)[0] == 201
    status, body = call(broker, "POST", "/api/v1/queues/orders.in/purge", {}, auth=ORDERS)[:2]
    assert status == 200 and body["removed"] == 0
    status, body = call(broker, "POST", "/api/v1/queues/general.q/purge", {}, auth=ORDERS)[:2]
    assert status == 403 and "'manage'" in body["error"] and "general.q" in body["error"]
    assert call(broker, "POST", "/api/v1/queues", {"name": "orders.new"}, auth=ORDERS)[0] == 201
    assert call(broker, "POST", "/api/v1/queues", {"name": "q2", "address": "orders.out"}, auth=ORDERS)[0] == 201
    status, body = call(broker, "POST", "/api/v1/queues", {"name": "general.new"}, auth=ORDERS)[:2]
    assert status == 403 and "general.new" in body["error"]
    assert call(broker, "POST", "/api/v1/addresses", {"name": "general.a"}, auth=ORDERS)[0] == 403
    assert call(broker, "POST", "/api/v1/addresses", {"name": "orders.a"}, auth=ORDERS)[0] == 201
    status, body = call(broker, "GET", "/api/v1/queues", auth=ORDERS)[:2]
    assert status == 403 and "'view'" in body["error"]  # the queue list is the whole broker's ("#")
    assert call(broker, "GET", "/api/v1/queues/orders.in", auth=ORDERS)[0] == 200
    status, body = call(broker, "DELETE", "/api/v1/queues/general.q", auth=VIEWER)[:2]
    assert status == 403
    assert call(broker, "DELETE", "/api/v1/queues/general.q", auth=ADMIN)[0] == 200
    assert "action=manage" in broker.log() and "result=refused" in broker.log()  # the audit lines


def test_a_move_needs_manage_on_its_target_too(broker):
    """The orders user manages orders.# only: it may move between its queues, not out of them into
    a queue it does not manage (whose messages it could not send there either)."""
    for name in ("orders.src", "orders.dst", "general.dst"):
        assert call(broker, "POST", "/api/v1/queues", {"name": name}, auth=ADMIN)[0] == 201
    status, body = call(broker, "POST", "/api/v1/queues/orders.src/move", {"to": "general.dst"}, auth=ORDERS)[:2]
    assert status == 403 and "general.dst" in body["error"] and "'manage'" in body["error"], body
    status, body = call(broker, "POST", "/api/v1/queues/orders.src/move", {"to": "orders.dst"}, auth=ORDERS)[:2]
    assert status == 200 and body["moved"] == 0, body
    assert call(broker, "POST", "/api/v1/queues/orders.src/move", {"to": "general.dst"}, auth=ADMIN)[0] == 200


def test_a_retry_sends_back_only_to_addresses_the_user_manages(broker):
    """Retrying a dead-letter queue needs manage on each address a message goes back to: the others
    stay, and the answer names their addresses."""
    from petrel.client import Connection, Message
    from petrel.core.message import ORIGINAL_ADDRESS

    for name in ("orders.dlq", "orders.back", "general.back"):
        assert call(broker, "POST", "/api/v1/queues", {"name": name}, auth=ADMIN)[0] == 201
    with Connection(f"tcp://127.0.0.1:{broker.port}", user="admin", password="admin-pw") as conn:
        producer = conn.session().producer("queue://orders.dlq")
        for back in ("orders.back", "general.back"):
            producer.send(Message(back.encode(), {ORIGINAL_ADDRESS: back}, durable=True), wait=True)
    status, body = call(broker, "POST", "/api/v1/queues/orders.dlq/retry", {}, auth=ORDERS)[:2]
    assert status == 200 and body["retried"] == 1 and body["not_permitted"] == ["general.back"], body
    count = lambda name: call(broker, "GET", f"/api/v1/queues/{name}/count", auth=ADMIN)[1]["count"]  # noqa: E731
    assert (count("orders.back"), count("general.back"), count("orders.dlq")) == (1, 0, 1)
    status, body = call(broker, "POST", "/api/v1/queues/orders.dlq/retry", {}, auth=ADMIN)[:2]
    assert status == 200 and body["retried"] == 1 and "not_permitted" not in body, body
    assert count("general.back") == 1


def test_bearer_tokens(broker):
    status, body, headers = call(broker, "POST", "/api/v1/tokens", {}, auth=VIEWER)
    assert status == 201 and body["token_type"] == "Bearer" and body["expires_in"] == 3600
    assert headers.get("Cache-Control") == "no-store"
    token = "Bearer " + body["token"]
    assert call(broker, "GET", "/api/v1/queues", auth=token)[0] == 200
    status, body = call(broker, "POST", "/api/v1/queues", {"name": "by.token"}, auth=token)[:2]
    assert status == 403 and "'manage'" in body["error"]  # a token carries its user's rights, no more
    # a token does not make another token
    assert call(broker, "POST", "/api/v1/tokens", {}, auth=token)[0] == 401
    assert call(broker, "POST", "/api/v1/tokens", {}, auth=basic("viewer", "bad"))[0] == 401
    status, body = call(broker, "DELETE", "/api/v1/tokens", auth=token)[:2]
    assert status == 200 and body["revoked"] is True
    status, body = call(broker, "GET", "/api/v1/queues", auth=token)[:2]
    assert status == 401 and "expired" in body["error"]


def test_metrics_need_view(broker):
    assert call(broker, "GET", "/metrics")[0] == 401
    status, body = call(broker, "GET", "/metrics", auth=VIEWER)[:2]
    assert status == 200 and "petrel_" in body["text"]
    assert call(broker, "GET", "/metrics", auth=ORDERS)[0] == 403


def test_cross_site_requests_are_refused_even_with_credentials(broker):
    status, body = call(broker, "POST", "/api/v1/queues", {"name": "csrf.q"}, auth=ADMIN,
                        headers={"Origin": "https://evil.example"})[:2]
    assert status == 403 and "cross-origin" in body["error"]
    status, body = call(broker, "POST", "/api/v1/queues", raw=b"name=csrf.q", auth=ADMIN,
                        headers={"Content-Type": "application/x-www-form-urlencoded"})[:2]
    assert status == 415
    deep = b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, body = call(broker, "POST", "/api/v1/queues", raw=deep, auth=ADMIN)[:2]
    assert status == 400 and "nested too deeply" in body["error"]
    assert call(broker, "GET", "/api/v1/queues/csrf.q", auth=ADMIN)[0] == 404
    assert call(broker, "GET", "/health")[0] == 200


def petrel(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PETREL_USER", "PETREL_PASSWORD")}
    return subprocess.run([sys.executable, "-m", "petrel", *args], capture_output=True, text=True, timeout=60,
                          env={**base, **(env or {})})


def test_cli_sends_user_and_password_and_says_what_to_do_when_refused(broker):
    url = f"http://127.0.0.1:{broker.http_port}"
    out = petrel("queue", "stat", "--url", url)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "--user and --password" in out.stderr and "PETREL_USER" in out.stderr
    out = petrel("queue", "stat", "--url", url, "--user", "viewer", "--password", "nope")
    assert out.returncode == 1 and "refused the login of user 'viewer'" in out.stderr
    out = petrel("queue", "stat", "--url", url, "--user", "viewer", "--password", "viewer-pw")
    assert out.returncode == 0 and "DLQ" in out.stdout, out.stderr
    out = petrel("queue", "stat", "--url", url, env={"PETREL_USER": "viewer", "PETREL_PASSWORD": "viewer-pw"})
    assert out.returncode == 0 and "DLQ" in out.stdout, out.stderr
    out = petrel("queue", "create", "--url", url, "--name", "cli.q", "--user", "viewer", "--password", "viewer-pw")
    assert out.returncode == 1 and "lacks permission 'manage'" in out.stderr and "[security_settings]" in out.stderr
    out = petrel("queue", "create", "--url", url, "--name", "cli.q", "--user", "admin", "--password", "admin-pw")
    assert out.returncode == 0, out.stderr
    out = petrel("queue", "purge", "--url", url, "--name", "cli.q", "--user", "admin", "--password", "admin-pw")
    assert out.returncode == 0, out.stderr
    out = petrel("queue", "delete", "--url", url, "--name", "cli.q", env={"PETREL_USER": "admin",
                                                                          "PETREL_PASSWORD": "admin-pw"})
    assert out.returncode == 0, out.stderr


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def test_management_listens_on_loopback_unless_opened(tmp_path):
    """127.0.0.2 is this host too, but not the address 127.0.0.1 a default broker binds."""
    closed = BrokerProcess(tmp_path / "closed", http=True)
    opened = BrokerProcess(tmp_path / "opened", http=True, settings='http_host = "0.0.0.0"\n')
    try:
        closed.start()
        opened.start()
        assert _reachable("127.0.0.1", closed.http_port) and not _reachable("127.0.0.2", closed.http_port)
        assert _reachable("127.0.0.2", opened.http_port)
    finally:
        closed.stop()
        opened.stop()


def test_metrics_can_be_opened(tmp_path):
    b = BrokerProcess(tmp_path / "m", http=True, env={**OWN_SECURITY, "PETREL_MANAGEMENT_METRICS_OPEN": "true"})
    try:
        b.start()
        status, body = call(b, "GET", "/metrics")[:2]
        assert status == 200 and "petrel_" in body["text"]
        assert call(b, "GET", "/api/v1/queues")[0] == 401
    finally:
        b.stop()
