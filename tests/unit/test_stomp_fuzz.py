"""Property tests of the STOMP codec: fuzzed input and round trips, per version."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.codec.errors import LocalProtocolError, RemoteProtocolError
from petrel.codec.stomp import (
    CLIENT_COMMANDS,
    NEED_DATA,
    SERVER_COMMANDS,
    Frame,
    Heartbeat,
    Role,
    StompConnection,
)

from stomp_codec_harness import pair

SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
VERSIONS = ["1.0", "1.1", "1.2"]


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    """Split ``data`` at the given (unsorted, possibly repeated) offsets."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


# -- fuzz: any bytes give events or RemoteProtocolError -----------------------------------

# Pieces that steer random input into the parser's deeper paths.
TOKENS = [
    b"\n", b"\r\n", b"\r", b"\x00", b":", b"\\", b"\\c", b"\\n", b"\\r", b"\\t",
    b"content-length:", b"content-length:3", b"content-length:-1", b"accept-version:1.2",
    b"accept-version:1.1", b"version:1.2", b"receipt:1", b"destination:/q", b"\xff", b"\xc3",
    *[c.encode() for c in CLIENT_COMMANDS | SERVER_COMMANDS], b"FROB", b"abc", b"0", b"12",
]
token_streams = st.lists(
    st.one_of(st.sampled_from(TOKENS), st.binary(max_size=8)), max_size=60
).map(b"".join)
any_bytes = st.one_of(st.binary(max_size=300), token_streams)


def check_events(conn: StompConnection, chunks: list[bytes], *, on_connect=None) -> None:
    fed = 0
    events = 0
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            fed += len(chunk)
            while True:
                event = conn.next_event()
                if event is NEED_DATA:
                    break
                assert isinstance(event, (Frame, Heartbeat)), event
                events += 1
                assert events <= fed
                if isinstance(event, Frame):
                    assert event.command in CLIENT_COMMANDS | SERVER_COMMANDS
                    assert isinstance(event.body, bytes)
                    assert all(
                        isinstance(k, str) and isinstance(v, str) and k
                        for k, v in event.headers.items()
                    )
                    if on_connect is not None and event.command in ("CONNECT", "STOMP"):
                        on_connect(conn, event)
        conn.receive_data(b"")
        assert conn.next_event() is NEED_DATA
    except RemoteProtocolError as exc:
        assert exc.message and "\n" not in exc.message
        assert isinstance(exc.hint, dict)
        with pytest.raises(RemoteProtocolError):
            conn.next_event()


def negotiate(conn: StompConnection, frame: Frame) -> None:
    conn.negotiate(frame.headers.get("accept-version"))


@SETTINGS
@given(data=any_bytes, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20))
def test_fuzz_server(data, cuts):
    conn = StompConnection(Role.SERVER, max_frame_size=256, max_headers=8, max_header_length=64)
    check_events(conn, chunked(data, cuts), on_connect=negotiate)


@SETTINGS
@given(
    version=st.sampled_from(VERSIONS),
    data=any_bytes,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_fuzz_server_after_connect(version, data, cuts):
    conn = StompConnection(Role.SERVER, max_frame_size=256, max_headers=8, max_header_length=64)
    conn.receive_data(b"CONNECT\n\n\x00")
    assert conn.next_event().command == "CONNECT"
    conn.negotiate(version)
    check_events(conn, chunked(data, cuts))


@SETTINGS
@given(
    accept=st.sampled_from(["1.0", "1.1", "1.2", "1.0,1.1,1.2"]),
    data=any_bytes,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_fuzz_client(accept, data, cuts):
    conn = StompConnection(Role.CLIENT, max_frame_size=256, max_headers=8, max_header_length=64)
    conn.send(Frame("CONNECT", {"accept-version": accept}))
    check_events(conn, chunked(b"CONNECTED\nversion:1.2\n\n\x00" + data, cuts))


# -- round trips ------------------------------------------------------------------------------

# Header text: anything, with the separators and escape characters made likely.
header_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(":\\\n\r\x00 é€😀"), st.characters(exclude_categories=("Cs",))
    ),
    max_size=12,
)
# The same, lone surrogates included (they cannot be encoded).
any_header_text = st.text(
    alphabet=st.one_of(st.sampled_from(":\\\n\r\x00\ud800"), st.characters()), max_size=12
)


def representable(version: str | None, name: str, value: str) -> bool:
    """Whether a header can go out in ``version`` (None: CONNECT-style, never escaped)."""
    if not name or "\x00" in name or "\x00" in value or name == "content-length":
        return False
    try:
        (name + value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    if version in (None, "1.0"):
        if ":" in name or "\n" in name or "\n" in value:
            return False
    if version != "1.2" and value.endswith("\r"):
        return False
    return True


def valid_headers(version: str | None):
    return st.dictionaries(header_text, header_text, max_size=6).map(
        lambda h: {k: v for k, v in h.items() if representable(version, k, v)}
    )


def parse_all(conn: StompConnection, chunks: list[bytes]) -> list[Frame]:
    out = []
    for chunk in chunks:
        conn.receive_data(chunk)
        while (event := conn.next_event()) is not NEED_DATA:
            if isinstance(event, Frame):
                out.append(event)
    return out


def expected(frame: Frame) -> Frame:
    if frame.body:
        return Frame(frame.command, {**frame.headers, "content-length": str(len(frame.body))}, frame.body)
    return frame


@st.composite
def frame_lists(draw, version: str, commands: list[str]):
    count = draw(st.integers(min_value=1, max_value=5))
    return [
        Frame(
            draw(st.sampled_from(commands)),
            draw(valid_headers(version)),
            draw(st.binary(max_size=64)),
        )
        for _ in range(count)
    ]


CLIENT_SENDS = ["SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT"]
SERVER_SENDS = ["MESSAGE", "RECEIPT"]


@SETTINGS
@given(version=st.sampled_from(VERSIONS), data=st.data())
def test_round_trip_client_to_server(version, data):
    c, s = pair(version)
    frames = data.draw(frame_lists(version, CLIENT_SENDS))
    beats = data.draw(st.lists(st.sampled_from([b"", b"\n", b"\r\n", b"\n\n"]), min_size=len(frames), max_size=len(frames)))
    stream = b"".join(c.send(f) + beat for f, beat in zip(frames, beats))
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=30))
    assert parse_all(s, chunked(stream, cuts)) == [expected(f) for f in frames]


@SETTINGS
@given(version=st.sampled_from(VERSIONS), data=st.data())
def test_round_trip_server_to_client(version, data):
    c, s = pair(version)
    frames = data.draw(frame_lists(version, SERVER_SENDS))
    frames.append(Frame("ERROR", data.draw(valid_headers(version)), data.draw(st.binary(max_size=32))))
    stream = b"".join(s.send(f) for f in frames)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=30))
    assert parse_all(c, chunked(stream, cuts)) == [expected(f) for f in frames]


@SETTINGS
@given(headers=valid_headers(None), body=st.binary(max_size=32).filter(lambda b: b"\x00" not in b),
       cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=20))
def test_round_trip_connect(headers, body, cuts):
    headers = {k: v for k, v in headers.items() if k != "accept-version"}
    c = StompConnection(Role.CLIENT)
    s = StompConnection(Role.SERVER)
    frame = Frame("CONNECT", headers, body)
    assert parse_all(s, chunked(c.send(frame), cuts)) == [frame]


@SETTINGS
@given(
    version=st.sampled_from(VERSIONS),
    headers=st.dictionaries(any_header_text, any_header_text, max_size=5),
    data=st.data(),
)
def test_send_either_refuses_or_round_trips(version, headers, data):
    """Arbitrary headers: send() raises LocalProtocolError or the peer reads them back exactly."""
    headers.pop("content-length", None)
    c, s = pair(version)
    frame = Frame("SEND", headers, data.draw(st.binary(max_size=16)))
    try:
        wire = c.send(frame)
    except LocalProtocolError:
        assert not all(representable(version, k, v) for k, v in headers.items())
        return
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=10))
    assert parse_all(s, chunked(wire, cuts)) == [expected(frame)]


# -- hand-written wire input: LF/CRLF mixed per line, heart-beats, both body kinds ------------

plain_text = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00\n\r:\\"),
    max_size=10,
)


@st.composite
def wire_frames(draw) -> tuple[bytes, Frame]:
    """One SEND frame written by hand with random EOLs, and the frame it stands for."""
    eol = st.sampled_from([b"\n", b"\r\n"])
    headers = draw(
        st.dictionaries(plain_text.filter(bool), plain_text, max_size=4).map(
            lambda h: {k: v for k, v in h.items() if k != "content-length"}
        )
    )
    with_length = draw(st.booleans())
    if with_length:
        body = draw(st.binary(max_size=40))
        headers["content-length"] = str(len(body))
    else:
        body = draw(st.binary(max_size=40).map(lambda b: b.replace(b"\x00", b"")))
    wire = b"SEND" + draw(eol)
    for name, value in headers.items():
        wire += f"{name}:{value}".encode() + draw(eol)
    wire += draw(eol) + body + b"\x00"
    wire += draw(st.sampled_from([b"", b"\n", b"\r\n", b"\n\n", b"\r\n\r\n\n"]))
    return wire, Frame("SEND", headers, body)


@SETTINGS
@given(
    version=st.sampled_from(VERSIONS),
    items=st.lists(wire_frames(), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
)
def test_mixed_line_endings_parse_the_same(version, items, cuts):
    s = StompConnection(Role.SERVER)
    s.receive_data(b"CONNECT\r\n\r\n\x00")
    assert s.next_event().command == "CONNECT"
    s.negotiate(version)
    stream = b"".join(wire for wire, _ in items)
    assert parse_all(s, chunked(stream, cuts)) == [frame for _, frame in items]
    s.receive_data(b"")
    assert s.next_event() is NEED_DATA
