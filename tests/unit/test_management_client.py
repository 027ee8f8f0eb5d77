"""`ManagementClient`: what an operator reads when the broker is away or says no."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from petrel.errors import UsageError
from petrel.management.client import ManagementClient, ManagementError, default_url
from petrel.testing.process import free_port


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/json-error"):
            self._reply(404, b'{"error": "queue \'x\' does not exist"}', "application/json")
        elif self.path.startswith("/html-error"):
            self._reply(502, b"<html>bad gateway</html>", "text/html")
        elif self.path.startswith("/not-json"):
            self._reply(200, b"hello", "text/plain")
        elif self.path.startswith("/list"):
            self._reply(200, b"[1, 2]", "application/json")
        else:
            self._reply(200, json.dumps({"path": self.path}).encode(), "application/json")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        self._reply(201, json.dumps({"got": body, "type": self.headers["Content-Type"]}).encode(), "application/json")

    def _reply(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_default_url_follows_the_port_offset():
    assert default_url() == "http://127.0.0.1:8161"
    assert default_url(100) == "http://127.0.0.1:8261"


def test_queries_and_bodies(server):
    client = ManagementClient(server + "/")
    assert client.get("/api/v1/queues", name="a b", flag=True, skip=None) == {"path": "/api/v1/queues?name=a+b&flag=true"}
    assert client.post("/x", {"k": 1}) == {"got": {"k": 1}, "type": "application/json"}


def test_an_api_error_carries_its_message_and_status(server):
    with pytest.raises(ManagementError) as info:
        ManagementClient(server).get("/json-error")
    assert str(info.value) == "queue 'x' does not exist" and info.value.status == 404


def test_a_non_json_error_names_the_status(server):
    with pytest.raises(ManagementError, match="HTTP 502") as info:
        ManagementClient(server).get("/html-error")
    assert info.value.status == 502


@pytest.mark.parametrize("path", ["/not-json", "/list"])
def test_an_unexpected_answer_is_an_error(server, path):
    with pytest.raises(ManagementError, match="unexpected answer"):
        ManagementClient(server).get(path)


def test_connection_refused_is_one_clear_line():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ManagementError) as info:
        ManagementClient(url).get("/health")
    text = str(info.value)
    assert text == f"cannot reach the broker at {url} (connection refused); is it running?"
    assert info.value.exit_code == 1 and info.value.status is None


def test_a_silent_server_times_out():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(ManagementError, match=r"\(timed out\); is it running\?"):
            ManagementClient(url, timeout=0.3).get("/health")


@pytest.mark.parametrize("url", ["tcp://localhost:61616", "localhost:8161", "http://", "ftp://h/"])
def test_a_url_that_is_not_http_is_a_usage_error(url):
    with pytest.raises(UsageError, match="--url must be an http:// URL") as info:
        ManagementClient(url)
    assert info.value.exit_code == 2
