"""Driving a STOMP codec in tests: feeding bytes, draining events, connected ends and pairs.

Shared by test_stomp_codec.py, test_stomp_versions.py, test_stomp_fuzz.py and
test_large_store_codec.py (import by name: the test directory is on ``sys.path``).
"""

from __future__ import annotations

import pytest

from petrel.codec.errors import RemoteProtocolError
from petrel.codec.stomp import NEED_DATA, Frame, Role, StompConnection

__all__ = ["client", "drain", "feed", "frames_of", "pair", "raises_remote", "server"]


def drain(conn: StompConnection) -> list:
    """Every event currently available, up to NEED_DATA."""
    out = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def feed(conn: StompConnection, data: bytes, chunk: int | None = None) -> list:
    """Feed ``data`` (in ``chunk``-byte pieces) draining events after each piece."""
    if chunk is None:
        conn.receive_data(data)
        return drain(conn)
    out = []
    for i in range(0, len(data), chunk):
        conn.receive_data(data[i : i + chunk])
        out.extend(drain(conn))
    return out


def frames_of(events: list) -> list[Frame]:
    return [e for e in events if isinstance(e, Frame)]


def server(version: str | None = "1.2", **limits) -> StompConnection:
    """A server that has received CONNECT and negotiated ``version`` (None: not negotiated)."""
    conn = StompConnection(Role.SERVER, **limits)
    accept = "1.0,1.1,1.2" if version is None else version
    conn.receive_data(f"CONNECT\naccept-version:{accept}\nhost:h\n\n\x00".encode())
    [connect] = drain(conn)
    assert connect.command == "CONNECT"
    if version is not None:
        assert conn.negotiate(connect.headers["accept-version"]) == version
    return conn


def client(version: str = "1.2", **limits) -> StompConnection:
    """A client that sent CONNECT and received CONNECTED for ``version``."""
    conn = StompConnection(Role.CLIENT, **limits)
    conn.send(Frame("CONNECT", {"accept-version": version, "host": "h"}))
    conn.receive_data(f"CONNECTED\nversion:{version}\n\n\x00".encode())
    [connected] = drain(conn)
    assert connected.command == "CONNECTED" and conn.version == version
    return conn


def pair(version: str) -> tuple[StompConnection, StompConnection]:
    """A connected (client, server) pair that negotiated ``version`` through the codecs."""
    c = StompConnection(Role.CLIENT)
    s = StompConnection(Role.SERVER)
    s.receive_data(c.send(Frame("CONNECT", {"accept-version": version, "host": "h"})))
    [connect] = drain(s)
    assert s.negotiate(connect.headers.get("accept-version")) == version
    c.receive_data(s.send(Frame("CONNECTED", {})))
    [connected] = drain(c)
    assert c.version == s.version == version
    assert connected.headers["version"] == version
    return c, s


def raises_remote(conn: StompConnection, data: bytes, *fragments: str, chunk: int | None = None):
    """Feeding ``data`` raises RemoteProtocolError whose one-line message holds every fragment."""
    with pytest.raises(RemoteProtocolError) as info:
        feed(conn, data, chunk)
    for fragment in fragments:
        assert fragment in info.value.message, info.value.message
    assert "\n" not in info.value.message and "\r" not in info.value.message
    return info.value
