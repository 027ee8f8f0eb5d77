"""`petrel cluster up` says why a node is not ready: the broker's own reason from /health."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from petrel.orchestrator.local import Node, _not_ready_reason


def _serve(status: int, body: dict):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _node(http_port: int) -> Node:
    return Node(1, "node1", 0, 1, 2, http_port, "/nonexistent", "/nonexistent", "/nonexistent", "/nonexistent")


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"status": "ok"}, None),
        (503, {"status": "cannot persist", "reason": "disk 95% full, over max_disk_usage 90%"},
         "disk 95% full, over max_disk_usage 90%"),
        (503, {"status": "stopping"}, "stopping"),
    ],
)
def test_the_reason_a_node_is_not_ready_is_the_brokers_own(status, body, expected):
    server = _serve(status, body)
    try:
        assert _not_ready_reason(_node(server.server_address[1])) == expected
    finally:
        server.shutdown()


def test_a_node_that_does_not_answer_is_not_ready():
    server = _serve(200, {})
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    assert _not_ready_reason(_node(port)) == "no answer from /health"
