"""STOMP codec: parsing every frame, EOLs and heart-beats, bodies, protocol errors, limits.

Escaping, sending rules and negotiation are in test_stomp_versions.py; fuzzing and
round trips in test_stomp_fuzz.py.
"""

from __future__ import annotations

import pytest

from petrel.codec.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from petrel.codec.stomp import (
    CLIENT_COMMANDS,
    HEARTBEAT,
    NEED_DATA,
    SERVER_COMMANDS,
    Frame,
    Heartbeat,
    Phase,
    Role,
    StompConnection,
)

from stomp_codec_harness import client, drain, feed, frames_of, raises_remote, server

VERSIONS = ["1.0", "1.1", "1.2"]


# -- every command, whole, byte by byte, with trailing bytes -------------------------------

CLIENT_FRAMES = {
    "CONNECT": b"CONNECT\naccept-version:1.2\nhost:example\nlogin:u\npasscode:p\n\n\x00",
    "STOMP": b"STOMP\naccept-version:1.2\nhost:example\nheart-beat:0,0\n\n\x00",
    "SEND": b"SEND\ndestination:/queue/a\ncontent-type:text/plain\n\nhello\x00",
    "SUBSCRIBE": b"SUBSCRIBE\nid:0\ndestination:/queue/a\nack:client\n\n\x00",
    "UNSUBSCRIBE": b"UNSUBSCRIBE\nid:0\n\n\x00",
    "ACK": b"ACK\nid:12345\ntransaction:tx1\n\n\x00",
    "NACK": b"NACK\nid:12345\n\n\x00",
    "BEGIN": b"BEGIN\ntransaction:tx1\n\n\x00",
    "COMMIT": b"COMMIT\ntransaction:tx1\n\n\x00",
    "ABORT": b"ABORT\ntransaction:tx1\n\n\x00",
    "DISCONNECT": b"DISCONNECT\nreceipt:77\n\n\x00",
}
SERVER_FRAMES = {
    "CONNECTED": b"CONNECTED\nversion:1.2\nserver:petrel/0\nheart-beat:0,0\n\n\x00",
    "MESSAGE": b"MESSAGE\nsubscription:0\nmessage-id:007\ndestination:/queue/a\n"
    b"content-length:5\n\nhe\x00lo\x00",
    "RECEIPT": b"RECEIPT\nreceipt-id:77\n\n\x00",
    "ERROR": b"ERROR\nmessage:malformed frame received\ncontent-type:text/plain\n\noops\x00",
}
EXPECTED = {
    "CONNECT": {"accept-version": "1.2", "host": "example", "login": "u", "passcode": "p"},
    "STOMP": {"accept-version": "1.2", "host": "example", "heart-beat": "0,0"},
    "SEND": {"destination": "/queue/a", "content-type": "text/plain"},
    "SUBSCRIBE": {"id": "0", "destination": "/queue/a", "ack": "client"},
    "UNSUBSCRIBE": {"id": "0"},
    "ACK": {"id": "12345", "transaction": "tx1"},
    "NACK": {"id": "12345"},
    "BEGIN": {"transaction": "tx1"},
    "COMMIT": {"transaction": "tx1"},
    "ABORT": {"transaction": "tx1"},
    "DISCONNECT": {"receipt": "77"},
    "CONNECTED": {"version": "1.2", "server": "petrel/0", "heart-beat": "0,0"},
    "MESSAGE": {
        "subscription": "0",
        "message-id": "007",
        "destination": "/queue/a",
        "content-length": "5",
    },
    "RECEIPT": {"receipt-id": "77"},
    "ERROR": {"message": "malformed frame received", "content-type": "text/plain"},
}
BODIES = {"SEND": b"hello", "MESSAGE": b"he\x00lo", "ERROR": b"oops"}


def test_command_tables_cover_the_spec():
    assert CLIENT_COMMANDS == set(CLIENT_FRAMES)
    assert SERVER_COMMANDS == set(SERVER_FRAMES)


def _receiver_for(command: str) -> StompConnection:
    if command in ("CONNECT", "STOMP"):
        return StompConnection(Role.SERVER)
    if command in CLIENT_COMMANDS:
        return server("1.2")
    conn = StompConnection(Role.CLIENT)
    conn.send(Frame("CONNECT", {"accept-version": "1.2"}))
    if command != "CONNECTED":
        conn.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
        drain(conn)
    return conn


@pytest.mark.parametrize("command", sorted(CLIENT_FRAMES) + sorted(SERVER_FRAMES))
@pytest.mark.parametrize("mode", ["whole", "bytewise", "trailing"])
def test_every_command_parses(command, mode):
    raw = {**CLIENT_FRAMES, **SERVER_FRAMES}[command]
    conn = _receiver_for(command)
    if mode == "whole":
        events = feed(conn, raw)
    elif mode == "bytewise":
        events = feed(conn, raw, chunk=1)
    else:
        events = feed(conn, raw + b"\nSEN")
    assert events[0] == Frame(command, EXPECTED[command], BODIES.get(command, b""))
    assert isinstance(events[0].body, bytes)
    if mode == "trailing":
        # The EOL is a heart-beat; the start of the next frame stays buffered.
        assert events[1:] == [HEARTBEAT]
        assert conn.buffered_bytes == 3
        assert conn.next_event() is NEED_DATA
    else:
        assert len(events) == 1
        assert conn.buffered_bytes == 0


def test_trailing_partial_frame_is_completed_by_the_next_read():
    conn = server()
    first = CLIENT_FRAMES["SEND"]
    second = CLIENT_FRAMES["SUBSCRIBE"]
    stream = first + second + first
    for cut in range(1, len(stream)):
        conn = server()
        events = feed(conn, stream[:cut]) + feed(conn, stream[cut:])
        assert [f.command for f in frames_of(events)] == ["SEND", "SUBSCRIBE", "SEND"]
        assert frames_of(events)[1].headers == EXPECTED["SUBSCRIBE"]


def test_many_frames_in_one_read():
    conn = server()
    frames = [
        Frame("SEND", {"destination": f"/queue/{i}", "n": str(i)}, bytes([i % 256]) * i)
        for i in range(300)
    ]
    c = client()
    stream = b"".join(c.send(f) for f in frames)
    got = feed(conn, stream)
    assert len(got) == 300
    for sent, parsed in zip(frames, got):
        assert parsed.headers["n"] == sent.headers["n"]
        assert parsed.body == sent.body


# -- EOLs: CRLF and heart-beats -------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_crlf_frames(version, chunk):
    s = server(version)
    stream = (
        b"SEND\r\ndestination:/queue/a\r\nreceipt:1\r\n\r\nbody\x00\r\n"
        b"SEND\ndestination:/queue/b\r\n\nx\x00"  # CRLF header, LF blank line
        b"SEND\r\ndestination:/queue/c\n\r\ny\x00"  # LF header, CRLF blank line
    )
    got = frames_of(feed(s, stream, chunk))
    assert got == [
        Frame("SEND", {"destination": "/queue/a", "receipt": "1"}, b"body"),
        Frame("SEND", {"destination": "/queue/b"}, b"x"),
        Frame("SEND", {"destination": "/queue/c"}, b"y"),
    ]


def test_crlf_no_headers_and_cr_inside_value():
    s = server("1.0")
    got = feed(s, b"BEGIN\r\n\r\n\x00SEND\nx:a\rb\n\n\x00")
    assert got == [Frame("BEGIN", {}), Frame("SEND", {"x": "a\rb"})]


@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_heartbeats_between_frames(chunk):
    s = server()
    eols = [b"\n", b"\r\n", b"\n\n\n", b"\r\n\n\r\n"]
    stream = b"".join(CLIENT_FRAMES["SEND"] + e for e in eols) + CLIENT_FRAMES["SEND"]
    events = feed(s, stream, chunk)
    assert len(frames_of(events)) == 5
    assert all(isinstance(e, (Frame, Heartbeat)) for e in events)
    beats = [e for e in events if isinstance(e, Heartbeat)]
    # At least one heart-beat per gap, never more than one per byte.
    assert len(eols) <= len(beats) <= sum(len(e) for e in eols)
    # A heart-beat sits between each pair of frames.
    kinds = [type(e) for e in events]
    for i in range(len(kinds) - 1):
        assert not (kinds[i] is Frame and kinds[i + 1] is Frame)


def test_heartbeats_before_connect_and_split_crlf():
    s = StompConnection(Role.SERVER)
    assert feed(s, b"\n\n") == [HEARTBEAT]
    assert feed(s, b"\r") == []  # waits for the LF
    assert s.buffered_bytes == 1
    assert feed(s, b"\n") == [HEARTBEAT]
    assert s.buffered_bytes == 0
    assert s.send_heartbeat() == b"\n"
    assert feed(s, b"\r\nCONNECT\n\n\x00") == [HEARTBEAT, Frame("CONNECT", {})]


def test_heartbeat_event_is_a_singleton_value():
    assert Heartbeat() == HEARTBEAT
    s = server()
    assert feed(s, b"\n")[0] is HEARTBEAT


# -- bodies -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_content_length_body_may_hold_nuls(chunk):
    s = server()
    body = b"\x00a\x00\x00b\x00"
    stream = f"SEND\ndestination:/q\ncontent-length:{len(body)}\n\n".encode() + body + b"\x00"
    stream += b"SEND\ncontent-length:0\n\n\x00"
    got = feed(s, stream, chunk)
    assert got == [
        Frame("SEND", {"destination": "/q", "content-length": "6"}, body),
        Frame("SEND", {"content-length": "0"}, b""),
    ]


def test_body_without_content_length_ends_at_first_nul():
    s = server()
    s.receive_data(b"SEND\nd:/q\n\nabc\x00def\x00")
    assert s.next_event() == Frame("SEND", {"d": "/q"}, b"abc")
    # What follows is read as the next frame, which has no blank line.
    with pytest.raises(RemoteProtocolError, match="NUL"):
        s.next_event()


def test_content_length_waits_for_the_whole_body():
    s = server()
    head = b"SEND\ncontent-length:10\n\n"
    assert feed(s, head + b"01234") == []
    assert feed(s, b"56789") == []
    assert feed(s, b"\x00") == [Frame("SEND", {"content-length": "10"}, b"0123456789")]


def test_large_body_in_small_chunks_is_linear_enough():
    s = server()
    body = bytes(range(256)) * 4096  # 1 MiB, NULs included
    stream = f"SEND\ncontent-length:{len(body)}\n\n".encode() + body + b"\x00"
    got = feed(s, stream, chunk=4096)
    assert got == [Frame("SEND", {"content-length": str(len(body))}, body)]
    body = b"z" * (1 << 20)
    got = feed(s, b"SEND\n\n" + body + b"\x00", chunk=4096)
    assert got == [Frame("SEND", {}, body)]


# -- errors -----------------------------------------------------------------------------------


def test_frame_before_connect():
    raises_remote(StompConnection(Role.SERVER), CLIENT_FRAMES["SEND"], "expected CONNECT or STOMP")


def test_unknown_command_is_named():
    raises_remote(server(), b"FROB\nx:y\n\n\x00", "unknown command", "FROB")


def test_unknown_command_refused_before_the_blank_line():
    s = StompConnection(Role.SERVER)
    raises_remote(s, b"GET / HTTP/1.1\r\nHost: example\r\n", "unknown command", "GET")


def test_lowercase_command_is_unknown():
    raises_remote(server(), b"send\n\n\x00", "unknown command")


def test_server_must_not_receive_server_commands():
    e = raises_remote(server(), b"MESSAGE\n\n\x00", "MESSAGE")
    assert "client" in e.message


def test_client_must_not_receive_client_commands():
    raises_remote(client(), b"SEND\ndestination:/q\n\n\x00", "SEND")


def test_client_expects_connected_first():
    c = StompConnection(Role.CLIENT)
    c.send(Frame("CONNECT", {"accept-version": "1.2"}))
    raises_remote(c, b"MESSAGE\n\n\x00", "expected CONNECTED or ERROR")


def test_second_connect_is_refused():
    raises_remote(server(), b"CONNECT\naccept-version:1.2\n\n\x00", "already connected")


def test_frames_after_disconnect_are_refused():
    s = server()
    assert feed(s, b"DISCONNECT\nreceipt:1\n\n\x00\n")[0].command == "DISCONNECT"
    assert s.their_phase is Phase.CLOSED
    raises_remote(s, CLIENT_FRAMES["SEND"], "after DISCONNECT")


def test_frames_after_error_are_refused_by_a_client():
    c = client()
    feed(c, b"ERROR\nmessage:bye\n\n\x00")
    raises_remote(c, b"MESSAGE\n\n\x00", "after ERROR")


@pytest.mark.parametrize("value", [b"abc", b"-1", b"", b"1.5", b"0x10", b"+3", "\u0663".encode()])
def test_bad_content_length(value):
    e = raises_remote(server(), b"SEND\nreceipt:r-9\ncontent-length:" + value + b"\n\nx\x00", "content-length")
    assert e.hint == {"receipt-id": "r-9"}


def test_content_length_body_must_end_in_nul():
    raises_remote(server(), b"SEND\ncontent-length:2\n\nabc\x00", "NUL", "content-length")


def test_header_line_without_colon():
    raises_remote(server(), b"SEND\ndestination/queue/a\n\n\x00", "without ':'")


def test_empty_header_name():
    raises_remote(server(), b"SEND\n:value\n\n\x00", "empty header name")


@pytest.mark.parametrize(
    "raw", [b"SEND\nx:\xff\xfe\n\n\x00", b"S\xc3END\n\n\x00", b"SEND\n\xed\xa0\x80:v\n\n\x00"]
)
def test_invalid_utf8(raw):
    raises_remote(server(), raw, "UTF-8")


def test_invalid_utf8_command_refused_before_the_blank_line():
    raises_remote(server(), b"\xffSEND\nx:y\n", "UTF-8")


def test_nul_inside_headers():
    raises_remote(server(), b"DISCONNECT\n\x00", "NUL")
    raises_remote(server(), b"SEND\nx:a\x00b\n\n\x00", "NUL")


@pytest.mark.parametrize("chunk", [None, 1])
def test_too_many_headers(chunk):
    s = server(max_headers=3)
    assert feed(s, b"SEND\na:1\nb:2\nc:3\n\n\x00", chunk)[0].headers == {"a": "1", "b": "2", "c": "3"}
    raises_remote(s, b"SEND\na:1\nb:2\nc:3\nd:4\n\n\x00", "too many headers", chunk=chunk)


def test_too_many_headers_detected_before_the_blank_line():
    s = server(max_headers=3)
    raises_remote(s, b"SEND\n" + b"a:1\n" * 10, "too many headers")


@pytest.mark.parametrize("chunk", [None, 1, 10])
def test_header_line_too_long(chunk):
    s = server(max_header_length=32)
    ok = b"SEND\nx:" + b"v" * 30 + b"\n\n\x00"
    assert feed(s, ok, chunk)[0].headers == {"x": "v" * 30}
    raises_remote(s, b"SEND\nx:" + b"v" * 40 + b"\n\n\x00", "too long", chunk=chunk)


def test_header_line_too_long_detected_before_its_end():
    s = server(max_header_length=32)
    raises_remote(s, b"SEND\nx:" + b"v" * 40, "too long")


def test_content_length_over_limit_refused_before_the_body():
    s = server(max_frame_size=1000)
    e = raises_remote(s, b"SEND\nreceipt:big\ncontent-length:5000\n\n", "too large")
    assert e.hint == {"receipt-id": "big"}


@pytest.mark.parametrize("head", [b"SEND\n\n", b"SEND\n", b"SEND"])
def test_oversized_read_is_refused_at_once(head):
    # One read holds more than a frame may: refused now, not after the next read.
    raises_remote(server(max_frame_size=100), head + b"x" * 200, "too large")


def test_frame_exactly_at_the_limit_passes():
    limit = 200
    head = b"SEND\n\n"
    s = server(max_frame_size=limit)
    body = b"x" * (limit - len(head))
    assert feed(s, head + body + b"\x00", chunk=16) == [Frame("SEND", {}, body)]
    s = server(max_frame_size=limit)
    raises_remote(s, head + body + b"y\x00", "too large", chunk=16)
    cl_head = b"SEND\ncontent-length:180\n\n"
    s = server(max_frame_size=len(cl_head) + 180)
    assert feed(s, cl_head + b"z" * 180 + b"\x00")[0].body == b"z" * 180
    s = server(max_frame_size=len(cl_head) + 179)
    raises_remote(s, cl_head, "too large")


@pytest.mark.parametrize(
    "stream",
    [
        b"SEND\ndestination:/q\n\n" + b"x" * 100_000,  # body never ends
        b"SEND\n" + b"h:v\n" * 50_000,  # headers never end
        b"SEND\nx:" + b"y" * 100_000,  # one endless header line
        b"\n" * 1000 + b"A" * 100_000,  # garbage with no EOL at all
    ],
)
@pytest.mark.parametrize("chunk", [64, 1000])
def test_size_limit_in_small_chunks_keeps_memory_bounded(stream, chunk):
    limit = 4096
    s = server(max_frame_size=limit, max_headers=100_000, max_header_length=1 << 20)
    with pytest.raises(RemoteProtocolError) as info:
        for i in range(0, len(stream), chunk):
            s.receive_data(stream[i : i + chunk])
            assert s.buffered_bytes <= limit + chunk
            assert len(s._parser.buf.data) <= limit + chunk
            drain(s)
    assert "too large" in info.value.message or "unknown command" in info.value.message
    assert i < limit + 2 * chunk + 1000  # noticed as soon as the limit was passed


def test_error_state_is_sticky_and_drops_input():
    s = server()
    with pytest.raises(RemoteProtocolError) as first:
        feed(s, b"BOGUS\n\n\x00")
    for _ in range(3):
        with pytest.raises(RemoteProtocolError) as again:
            s.next_event()
        assert again.value.message == first.value.message
    s.receive_data(CLIENT_FRAMES["SEND"])
    assert s.buffered_bytes == 0
    assert s.error is not None and s.error.message == first.value.message
    with pytest.raises(RemoteProtocolError):
        s.next_event()


def test_error_frame_can_still_be_sent_after_a_remote_error():
    s = StompConnection(Role.SERVER)
    with pytest.raises(RemoteProtocolError) as info:
        feed(s, b"SEND\n\n\x00")
    exc = info.value
    wire = s.send(Frame("ERROR", {"message": exc.message, **exc.hint}, exc.message.encode()))
    c = StompConnection(Role.CLIENT)
    c.send(Frame("CONNECT", {}))
    [err] = feed(c, wire)
    assert err.command == "ERROR" and err.headers["message"] == exc.message
    with pytest.raises(LocalProtocolError, match="after ERROR"):
        s.send(Frame("ERROR", {}))


def test_eof_between_frames_is_clean():
    s = server()
    feed(s, CLIENT_FRAMES["SEND"] + b"\r")
    s.receive_data(b"")
    assert s.they_closed
    assert s.next_event() is NEED_DATA
    s.receive_data(b"")  # a second EOF is harmless
    with pytest.raises(LocalProtocolError):
        s.receive_data(b"more")


@pytest.mark.parametrize(
    "partial", [b"SE", b"SEND\nx:y\n", b"SEND\n\nbody", b"SEND\ncontent-length:4\n\nab"]
)
def test_eof_in_the_middle_of_a_frame(partial):
    s = server()
    s.receive_data(partial)
    assert drain(s) == []
    s.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        s.next_event()


def test_protocol_errors_are_protocol_errors():
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert issubclass(LocalProtocolError, ProtocolError)
    e = RemoteProtocolError("boom", {"receipt-id": "1"})
    assert e.message == str(e) == "boom" and e.hint == {"receipt-id": "1"}
    assert ProtocolError("x").hint == {}


@pytest.mark.parametrize("digits", [20, 5000, 60000])
def test_huge_content_length_is_too_large_not_a_crash(digits):
    s = server(max_header_length=1 << 17)
    e = raises_remote(s, b"SEND\ncontent-length:" + b"9" * digits + b"\n\nx\x00", "too large")
    assert "limit" in e.message


def test_content_length_with_leading_zeros():
    s = server()
    zeros = b"0" * 40 + b"3"
    assert feed(s, b"SEND\ncontent-length:" + zeros + b"\n\nabc\x00")[0].body == b"abc"
