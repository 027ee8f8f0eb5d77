"""STOMP codec streaming for large bodies: FrameHeader, BodyChunk..., FrameEnd; streamed heads out."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.codec.errors import LocalProtocolError, RemoteProtocolError
from petrel.codec.stomp import (
    HEARTBEAT,
    BodyChunk,
    Frame,
    FrameEnd,
    FrameHeader,
    Role,
    StompConnection,
)
from petrel.codec.stomp.writer import BODY_END

from stomp_codec_harness import drain, feed

THRESHOLD = 100


def server(threshold: int | None = THRESHOLD, **kw) -> StompConnection:
    conn = StompConnection(Role.SERVER, stream_threshold=threshold, **kw)
    conn.receive_data(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
    (connect,) = drain(conn)
    conn.negotiate(connect.headers["accept-version"])
    conn.send(Frame("CONNECTED", {}))
    return conn


def collect(events: list) -> list:
    """Streamed frames folded back into (command, headers, body, streamed?) tuples."""
    out = []
    current = None
    parts: list[bytes] = []
    for e in events:
        if isinstance(e, FrameHeader):
            assert current is None
            current, parts = e, []
        elif isinstance(e, BodyChunk):
            assert current is not None and e.data
            parts.append(e.data)
        elif isinstance(e, FrameEnd):
            assert current is not None and e.command == current.command
            body = b"".join(parts)
            if current.length is not None:
                assert len(body) == current.length
            out.append((current.command, current.headers, body, True))
            current = None
        elif isinstance(e, Frame):
            assert current is None
            out.append((e.command, e.headers, e.body, False))
        else:
            assert e is HEARTBEAT
    assert current is None
    return out


def send_frame(body: bytes, *, length: bool = True, extra: str = "") -> bytes:
    cl = f"content-length:{len(body)}\n" if length else ""
    return f"SEND\ndestination:/queue/a\n{extra}{cl}\n".encode() + body + b"\x00"


BODY = bytes(range(256)) * 4  # 1024 bytes, NULs included


@pytest.mark.parametrize("chunk", [None, 1, 7, 100, 1000])
def test_content_length_over_threshold_streams(chunk):
    events = feed(server(), send_frame(BODY), chunk)
    assert isinstance(events[0], FrameHeader)
    assert events[0].headers["destination"] == "/queue/a"
    assert events[0].length == len(BODY)
    assert isinstance(events[-1], FrameEnd)
    assert collect(events) == [("SEND", events[0].headers, BODY, True)]


@pytest.mark.parametrize("chunk", [None, 1, 13])
def test_at_or_under_threshold_is_a_whole_frame(chunk):
    body = b"x" * THRESHOLD
    events = feed(server(), send_frame(body), chunk)
    assert len(events) == 1 and isinstance(events[0], Frame) and events[0].body == body


def test_no_threshold_never_streams():
    events = feed(server(None), send_frame(BODY))
    assert len(events) == 1 and events[0].body == BODY


@pytest.mark.parametrize("chunk", [1, 50, 101, 333])
def test_no_content_length_streams_once_over_threshold(chunk):
    body = bytes(range(1, 256)) * 3  # no NUL
    events = feed(server(), send_frame(body, length=False), chunk)
    frames = collect(events)
    assert frames[0][2] == body
    assert isinstance(events[0], FrameHeader) and events[0].length is None


def test_no_content_length_whole_when_the_nul_comes_in_the_same_read():
    body = bytes(range(1, 256)) * 3
    events = feed(server(), send_frame(body, length=False))
    assert len(events) == 1 and isinstance(events[0], Frame) and events[0].body == body


def test_frames_before_and_after_a_streamed_one_parse_normally():
    small = send_frame(b"hi")
    data = small + b"\n" + send_frame(BODY, extra="receipt:r1\n") + b"\n\n" + small
    for chunk in (None, 1, 64):
        got = collect(feed(server(), data, chunk))
        assert [(c, b, s) for c, _, b, s in got] == [
            ("SEND", b"hi", False), ("SEND", BODY, True), ("SEND", b"hi", False)
        ]
        assert got[1][1]["receipt"] == "r1"


def test_memory_stays_at_one_read_while_streaming():
    conn = server(threshold=1024)
    body = bytes(range(256)) * 20_000  # ~5 MB
    data = send_frame(body)
    seen = 0
    worst = 0
    for i in range(0, len(data), 65536):
        conn.receive_data(data[i : i + 65536])
        for e in drain(conn):
            if isinstance(e, BodyChunk):
                seen += len(e.data)
        worst = max(worst, conn.buffered_bytes)
    assert seen == len(body)
    assert worst <= 65536


def test_missing_nul_after_the_body_is_an_error():
    conn = server()
    data = send_frame(BODY)[:-1] + b"X"
    with pytest.raises(RemoteProtocolError, match="not followed by NUL"):
        feed(conn, data)
    with pytest.raises(RemoteProtocolError):  # the connection stays failed
        conn.next_event()


def test_eof_in_the_middle_of_a_streamed_body():
    conn = server()
    events = feed(conn, send_frame(BODY)[:500])
    assert isinstance(events[0], FrameHeader)
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="closed in the middle"):
        drain(conn)


def test_max_frame_size_still_bounds_streamed_frames():
    conn = server(max_frame_size=2000)
    with pytest.raises(RemoteProtocolError, match="too large"):
        feed(conn, send_frame(b"y" * 5000))
    conn = server(max_frame_size=2000)
    data = send_frame(bytes(range(1, 256)) * 40, length=False)
    with pytest.raises(RemoteProtocolError, match="too large"):
        feed(conn, data, 100)


def test_receipt_hint_on_a_streamed_error():
    conn = server(max_frame_size=500)
    with pytest.raises(RemoteProtocolError) as info:
        feed(conn, send_frame(b"z" * 1000, extra="receipt:77\n"))
    assert info.value.hint.get("receipt-id") == "77"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bodies=st.lists(st.binary(max_size=400), min_size=1, max_size=4),
    with_length=st.lists(st.booleans(), min_size=4, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
    threshold=st.integers(min_value=0, max_value=300),
)
def test_streaming_gives_what_whole_parsing_gives(bodies, with_length, cuts, threshold):
    frames = []
    for body, has_cl in zip(bodies, with_length):
        if not has_cl:
            body = body.replace(b"\x00", b"")
        frames.append(send_frame(body, length=has_cl))
    data = b"".join(frames)
    pieces = []
    last = 0
    for cut in sorted(set(min(c, len(data)) for c in cuts)):
        pieces.append(data[last:cut])
        last = cut
    pieces.append(data[last:])
    streamed = server(threshold)
    events = []
    for piece in pieces:
        if piece:
            streamed.receive_data(piece)
            events.extend(drain(streamed))
    whole = feed(server(None), data)
    got = collect(events)
    assert [(c, h, b) for c, h, b, _ in got] == [(f.command, f.headers, f.body) for f in whole]
    for (_, _, body, was_streamed) in got:
        if was_streamed:
            assert len(body) > threshold


# -- sending a streamed frame ----------------------------------------------------------------


def test_send_head_then_body_reads_back_as_one_frame():
    srv = server()
    head = srv.send_head(Frame("MESSAGE", {"destination": "/queue/a", "message-id": "1", "subscription": "s"}),
                         len(BODY))
    assert head.endswith(f"content-length:{len(BODY)}\n\n".encode())
    client = StompConnection(Role.CLIENT)
    client.send(Frame("CONNECT", {"accept-version": "1.2", "host": "h"}))
    client.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
    assert drain(client)[0].command == "CONNECTED"
    client.receive_data(head + BODY + BODY_END)
    (message,) = drain(client)
    assert message.command == "MESSAGE" and message.body == BODY
    assert message.headers["message-id"] == "1"


def test_send_head_escapes_headers_like_send():
    srv = server()
    head = srv.send_head(Frame("MESSAGE", {"k": "a:b\nc", "destination": "d", "message-id": "1",
                                           "subscription": "s"}), 3)
    whole = srv.send(Frame("MESSAGE", {"k": "a:b\nc", "destination": "d", "message-id": "1",
                                       "subscription": "s"}, b"abc"))
    assert head + b"abc" + BODY_END == whole


def test_send_head_without_headers():
    srv = server()
    assert srv.send_head(Frame("RECEIPT", {}), 0) == b"RECEIPT\ncontent-length:0\n\n"


@pytest.mark.parametrize(
    "frame",
    [
        Frame("MESSAGE", {"destination": "d"}, b"body"),
        Frame("MESSAGE", {"content-length": "5"}),
    ],
)
def test_send_head_refuses_a_body_or_a_length(frame):
    with pytest.raises(LocalProtocolError):
        server().send_head(frame, 5)


def test_send_head_respects_the_state_table():
    conn = StompConnection(Role.SERVER, stream_threshold=10)
    with pytest.raises(LocalProtocolError):
        conn.send_head(Frame("MESSAGE", {}), 10)  # not connected yet
    client = StompConnection(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        client.send_head(Frame("CONNECT", {}), 0)


def test_client_side_streams_messages_too():
    client = StompConnection(Role.CLIENT, stream_threshold=10)
    client.send(Frame("CONNECT", {"accept-version": "1.2", "host": "h"}))
    client.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
    drain(client)
    events = feed(client, b"MESSAGE\ndestination:d\nmessage-id:1\nsubscription:s\ncontent-length:20\n\n"
                  + b"m" * 20 + b"\x00", 3)
    assert collect(events)[0][2] == b"m" * 20
    assert isinstance(events[0], FrameHeader)


def test_negative_threshold_is_refused():
    with pytest.raises(ValueError):
        StompConnection(stream_threshold=-1)
