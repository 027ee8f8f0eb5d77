"""Property tests of the CORE codec: any bytes give events or RemoteProtocolError (nothing
else), whole, split anywhere, and with trailing bytes; random events round-trip."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.codec.core import (
    EVENT_TYPES,
    HEADER,
    NEED_DATA,
    PREAMBLE,
    Ack,
    Browse,
    Browsed,
    BrowseResult,
    Connect,
    Connected,
    CoreConnection,
    CreateConsumer,
    CreateQueue,
    Credit,
    Deliver,
    DeliverChunk,
    Disconnect,
    Event,
    Member,
    Nack,
    Ping,
    Result,
    Role,
    Send,
    SendChunk,
    SendConfirm,
    SendFailed,
    Topology,
    encode_frame,
)
from petrel.codec.errors import RemoteProtocolError

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def connected_server() -> CoreConnection:
    server = CoreConnection(Role.SERVER, max_frame_size=4096)
    server.receive_data(CoreConnection(Role.CLIENT).send(Connect([1])))
    server.accept(server.next_event())
    server.send(Connected(1))
    return server


def connecting_client() -> CoreConnection:
    client = CoreConnection(Role.CLIENT, max_frame_size=4096)
    client.send(Connect([1]))
    return client


def check_events(conn: CoreConnection, chunks: list[bytes]) -> list[Event]:
    events: list[Event] = []
    fed = 0
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            fed += len(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                assert isinstance(event, Event), event
                assert type(event.TYPE) is not None and EVENT_TYPES[event.TYPE] is type(event)
                events.append(event)
                # every frame costs at least its 5-byte header
                assert len(events) * 5 <= fed
        conn.receive_data(b"")
        assert conn.next_event() is NEED_DATA
    except RemoteProtocolError as exc:
        assert exc.message and "\n" not in exc.message
        with pytest.raises(RemoteProtocolError):
            conn.next_event()
    return events


# -- fuzz -------------------------------------------------------------------------------------

# Pieces that steer random input into deeper paths: valid headers and frames, msgpack bits.
VALID = [
    encode_frame(Ping(1)),
    encode_frame(Credit(1, 2, 3)),
    encode_frame(Send(1, "a", -1, True, 4, 0, 0, 0, {"k": "v"}, b"x", False)),
    encode_frame(Deliver(1, 1, 1, 0, 1, "a", False, 4, 0, 0, {}, b"", 0, False)),
    encode_frame(Connect([1])),
    encode_frame(Connected(1)),
    encode_frame(Disconnect(0, "")),
]
TOKENS = [
    *VALID,
    PREAMBLE,
    b"PETREL",
    HEADER.pack(1, 0x22),
    HEADER.pack(3, 0x28),
    HEADER.pack(0xFFFFFFFF, 0x22),
    b"\x93",
    b"\x9b",
    b"\x81",
    b"\xa1k",
    b"\xc0",
    b"\xc1",
    b"\xc4\x03abc",
    b"\x92\x01\x02",
    b"\xdc\xff\xff",
    b"\x00",
    b"\xff",
]
token_streams = st.lists(st.one_of(st.sampled_from(TOKENS), st.binary(max_size=8)), max_size=40).map(b"".join)
any_bytes = st.one_of(st.binary(max_size=300), token_streams)


@SETTINGS
@given(data=any_bytes, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_server_fuzz_fresh(data, cuts):
    check_events(CoreConnection(Role.SERVER, max_frame_size=4096), chunked(data, cuts))


@SETTINGS
@given(data=any_bytes, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_server_fuzz_after_preamble(data, cuts):
    check_events(CoreConnection(Role.SERVER, max_frame_size=4096), chunked(PREAMBLE + data, cuts))


@SETTINGS
@given(data=any_bytes, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_server_fuzz_connected(data, cuts):
    check_events(connected_server(), chunked(data, cuts))


@SETTINGS
@given(data=any_bytes, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_client_fuzz(data, cuts):
    check_events(connecting_client(), chunked(data, cuts))


@SETTINGS
@given(data=any_bytes)
def test_fuzz_bytewise_equals_whole(data):
    whole = check_events(connected_server(), [data])
    bytewise = check_events(connected_server(), [data[i : i + 1] for i in range(len(data))])
    assert bytewise == whole


# -- round trips of random events --------------------------------------------------------------

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
small = st.integers(min_value=0, max_value=2**32)
text = st.text(max_size=20)
scalars = st.one_of(st.none(), st.booleans(), ints, st.floats(allow_nan=False), text, st.binary(max_size=20))
props = st.dictionaries(text, scalars, max_size=5)
bodies = st.binary(max_size=300)

client_events = st.one_of(
    st.builds(Ping, small),
    st.builds(Send, small, text, st.integers(-1, 1), st.booleans(), st.integers(0, 9), small, small, small,
              props, bodies, st.booleans()),
    st.builds(SendChunk, small, bodies, st.booleans()),
    st.builds(CreateQueue, small, text, text, st.integers(0, 1), st.booleans(), st.none() | text,
              st.booleans(), st.booleans()),
    st.builds(CreateConsumer, small, small, small, text, st.integers(-1, 1), text, st.none() | text,
              st.none() | text, st.integers(-1, 2**31), st.booleans()),
    st.builds(Credit, small, small, small),
    st.builds(Ack, small, small, st.lists(small, max_size=10), st.booleans(), small),
    st.builds(Nack, small, small, st.lists(small, max_size=10), small, st.booleans()),
    st.builds(Browse, small, text, st.none() | text, small, small),
)
server_events = st.one_of(
    st.builds(Ping, small),
    st.builds(Deliver, small, small, small, small, small, text, st.booleans(), st.integers(0, 9), small, small,
              props, bodies, small, st.booleans()),
    st.builds(DeliverChunk, small, small, bodies, st.booleans()),
    st.builds(SendConfirm, small, small),
    st.builds(SendFailed, small, small, small, text),
    st.builds(Result, small, small, text, st.none() | ints | text | st.dictionaries(text, ints)),
    st.builds(Topology, small, st.lists(st.builds(Member, text, st.none() | text, st.none() | text, st.booleans()),
                                        max_size=4), st.booleans()),
    st.builds(BrowseResult, small, st.lists(st.builds(Browsed, small, small, text, st.booleans(),
                                                      st.integers(0, 9), small, small, small, small, props,
                                                      bodies), max_size=3), st.booleans()),
)


def _pair() -> tuple[CoreConnection, CoreConnection]:
    client, server = CoreConnection(Role.CLIENT), CoreConnection(Role.SERVER)
    server.receive_data(client.send(Connect([1])))
    server.accept(server.next_event())
    client.receive_data(server.send(Connected(1)))
    assert client.next_event() == Connected(1)
    return client, server


def _same(a: Event, b: Event) -> bool:
    # floats round-trip exactly in msgpack (float64), so plain equality is right
    return a == b


@SETTINGS
@given(events=st.lists(client_events, min_size=1, max_size=8), cuts=st.lists(st.integers(0, 5000), max_size=6))
def test_client_events_round_trip(events, cuts):
    client, server = _pair()
    data = b"".join(client.send(e) for e in events)
    got = check_events(server, chunked(data, cuts))
    assert len(got) == len(events) and all(_same(a, b) for a, b in zip(got, events))


@SETTINGS
@given(events=st.lists(server_events, min_size=1, max_size=8), cuts=st.lists(st.integers(0, 5000), max_size=6),
       trailing=st.binary(min_size=1, max_size=4))
def test_server_events_round_trip_with_trailing_bytes(events, cuts, trailing):
    client, server = _pair()
    data = b"".join(server.send(e) for e in events)
    # a partial header after the frames: the events come out, the tail waits
    tail = struct.pack("!I", 1 << 20)[: len(trailing)] if len(trailing) < 4 else trailing[:3]
    for chunk in chunked(data + tail, cuts):
        client.receive_data(chunk)
    got = []
    while (event := client.next_event()) is not NEED_DATA:
        got.append(event)
    assert got == events
    assert client.buffered_bytes == len(tail)


def _batched(conn: CoreConnection, chunks: list[bytes]) -> tuple[list[Event], bool]:
    events: list[Event] = []
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while batch := conn.next_events():
                events.extend(batch)
    except RemoteProtocolError:
        with pytest.raises(RemoteProtocolError):
            conn.next_events()
        return events, True
    return events, False


def _single(conn: CoreConnection, chunks: list[bytes]) -> tuple[list[Event], bool]:
    events: list[Event] = []
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                events.append(event)
    except RemoteProtocolError:
        return events, True
    return events, False


@SETTINGS
@given(data=any_bytes, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_next_events_matches_next_event(data, cuts):
    """The batch decoder gives the same events and the same verdict as the one-at-a-time one."""
    for make in (connected_server, connecting_client, lambda: CoreConnection(Role.SERVER, max_frame_size=4096)):
        assert _batched(make(), chunked(data, cuts)) == _single(make(), chunked(data, cuts))


@SETTINGS
@given(events=st.lists(client_events, min_size=1, max_size=8), cuts=st.lists(st.integers(0, 5000), max_size=6))
def test_next_events_round_trip(events, cuts):
    client, server = _pair()
    data = b"".join(client.send(e) for e in events)
    got, failed = _batched(server, chunked(data, cuts))
    assert not failed and got == events
