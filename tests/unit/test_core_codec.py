"""CORE codec: handshake, every frame whole / byte by byte / with trailing bytes, the state
table, limits and protocol errors. Fuzzing and round trips of random events are in
test_core_codec_fuzz.py."""

from __future__ import annotations

from typing import ClassVar

import pytest

from petrel.codec.core.cluster import (
    BindingInfo,
    Bindings,
    ClusterJoin,
    ClusterMember,
    ClusterMembers,
    Forward,
    GroupDecision,
    GroupPropose,
)
from petrel.codec.core import (
    CLIENT_EVENTS,
    EVENT_TYPES,
    HEADER,
    NEED_DATA,
    PREAMBLE,
    SERVER_EVENTS,
    Ack,
    Browse,
    Browsed,
    BrowseResult,
    CloseConsumer,
    CloseSession,
    Commit,
    Connect,
    Connected,
    CoreConnection,
    CreateAddress,
    CreateConsumer,
    CreateQueue,
    CreateSession,
    Credit,
    DeleteAddress,
    DeleteQueue,
    Deliver,
    DeliverChunk,
    Disconnect,
    Error,
    Event,
    FrameType,
    Member,
    Nack,
    Phase,
    Ping,
    Pong,
    Query,
    Result,
    Role,
    Rollback,
    Send,
    SendChunk,
    SendConfirm,
    SendFailed,
    Topology,
    credit_of,
    decode_payload,
    encode_frame,
    register,
)
from petrel.codec.core.cluster import (
    MigrateBatch,
    MigrateDuplicateIds,
    Migrated,
    MigrateQueue,
    MigrationBegin,
    MigrationDone,
)
from petrel.codec.core.cursors import (
    BodyRead,
    BrowseRange,
    CursorAck,
    CursorCreate,
    CursorDelete,
    CursorQuery,
    QueueSeqs,
    RangeMessage,
    RangeResult,
)
from petrel.codec.core.replication import (
    ReplicaAck,
    ReplicaFailback,
    ReplicaOps,
    ReplicaRegister,
    ReplicaStopping,
    ReplicaVote,
    ReplicaVoteAnswer,
)
from petrel.codec.errors import LocalProtocolError, RemoteProtocolError

PROPS = {"s": "text", "i": -7, "f": 1.5, "b": True, "n": None, "raw": b"\x00\xff", "_AMQ_DUPL_ID": "d-1"}

CLIENT_SAMPLES: list[Event] = [
    ClusterJoin(9, "c1", "node-a", "u-1", "127.0.0.1:61616", "cluster", "secret", 3, "http://127.0.0.1:8161"),
    Forward(1, "orders", -1, True, 4, 0, 1, 0, PROPS, b"body", False, ["orders", "q@node-c"], "node-a:17"),
    GroupPropose(10, "g1", "orders", "orders@node-b"),
    Ping(7),
    Pong(8),
    CreateAddress(1, "orders", [0, 1]),
    DeleteAddress(2, "orders"),
    CreateQueue(3, "q1", "orders", 0, True, "color = 'red'", False, True),
    DeleteQueue(4, "q1"),
    Query(5, "queue", "q1"),
    Browse(6, "q1", None, 10, 50),
    CreateSession(7, 1, True),
    CloseSession(8, 1),
    Send(1, "orders", 0, True, 9, 123, 456, 789, PROPS, b"body\x00bytes", False),
    Send(1, "big", -1, False, 4, 0, 0, 0, {}, b"x" * 1000, True),
    SendChunk(1, b"y" * 500, True),
    SendChunk(1, b"", False),
    CreateConsumer(9, 1, 3, "orders", 1, "", "a > 1", "sub", 4096, False),
    CloseConsumer(10, 1, 3),
    CloseConsumer(11, 1, 4, [9, 8]),
    Credit(1, 3, 65536),
    Ack(1, 3, [1, 2, 5], False, 0),
    Ack(1, 3, [9], True, 11),
    Nack(1, 3, [4], 12),
    Nack(1, 3, [6, 5], 0, True),
    Commit(13, 1),
    Rollback(14, 1),
    ReplicaRegister(15, "node-b", "pair-a", "cluster", "secret", "127.0.0.1:61617", True),
    ReplicaAck(4096),
    ReplicaFailback(),
    ReplicaVote(16, "node-a", "cluster", "secret"),
    MigrationBegin(17, "node-a", "cluster", "secret"),
    MigrateQueue(18, "sub-1", "prices", 1, True, "region = 'eu'", "client-1", "sub", {"exclusive": False}),
    MigrateDuplicateIds(19, "orders", ["a-1", "a-2"]),
    MigrationDone(20),
    MigrateBatch(1, 0, ["orders"], [Migrated("orders", True, 4, 0, 1, 0, PROPS, b"body", 2, "node-a:17@3"),
                                    Migrated("orders", False, 0, 0, 0, 0, {}, b"", 0, "node-a:18@3")]),
    QueueSeqs(21, "orders"),
    BrowseRange(22, "orders", 5, 105, 50),
    CursorAck(23, "orders", "spark", 104, True),
    CursorCreate(24, "orders", "spark", -1, True),
    CursorQuery(25, "orders", None),
    CursorDelete(26, "orders", "spark"),
    BodyRead(27, "orders", 7, 65536, 65536),
]
SERVER_SAMPLES: list[Event] = [
    ClusterMembers([ClusterMember("n1", "127.0.0.1:1", "http://127.0.0.1:2"), ClusterMember("n2", "h:1")]),
    Bindings(True, [BindingInfo("q", "q", "orders", 0, "a = 1", 2, [None, "b = 2"], 0, "n1")], ["old@n3"]),
    GroupDecision(10, "g1", "orders", None),
    Ping(1),
    Pong(1),
    Topology(5, [Member("n1", "127.0.0.1:61616", None), Member("n2", "h:1", "h:2", True)], True),
    Result(1, 0, "", {"name": "q1", "message_count": 3}),
    Result(2, 4, "queue 'x' does not exist", None),
    BrowseResult(6, [Browsed(1, 100, "orders", True, 4, 0, 1, 0, 0, PROPS, b"b")], True),
    SendConfirm(1, 1000),
    SendFailed(1, 17, 7, "no such address"),
    Deliver(1, 3, 42, 1, 1001, "orders", True, 4, 0, 99, PROPS, b"payload", 7, False),
    Deliver(1, 3, 43, 0, 1002, "big", False, 4, 0, 99, {}, b"z" * 300, 900, True),
    DeliverChunk(1, 3, b"z" * 600, False),
    ReplicaOps(7, [["write", "journal/petrel-data-1.pj", 4096, b"rec"], ["create", "paging/1/2.page", 0, None],
                   ["rename", "a", "b", None], ["sync-done", None, 6, [3, 4096]]]),
    ReplicaStopping(4097, True),
    ReplicaVoteAnswer(16, True, 3),
    RangeResult(22, "node-a", "orders", [RangeMessage(5, 1001, "d-1", "orders", True, 4, 0, 99, 0, 0, PROPS, b"b", 1)],
                6, 5, 105),
]


# -- helpers -------------------------------------------------------------------------------


def drain(conn: CoreConnection) -> list:
    out = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def feed(conn: CoreConnection, data: bytes, chunk: int | None = None) -> list:
    if chunk is None:
        conn.receive_data(data)
        return drain(conn)
    out = []
    for i in range(0, len(data), chunk):
        conn.receive_data(data[i : i + chunk])
        out.extend(drain(conn))
    return out


def pair() -> tuple[CoreConnection, CoreConnection]:
    """A connected client and server."""
    client, server = CoreConnection(Role.CLIENT), CoreConnection(Role.SERVER)
    [connect] = feed(server, client.send(Connect([1], ["topology", "large-messages"], "u", "p", "cid")))
    assert server.accept(connect) == 1
    [connected] = feed(client, server.send(Connected(1, ["topology", "browse"], "Petrel", "node")))
    assert connected.node_id == "node"
    return client, server


# -- handshake ---------------------------------------------------------------------------------


def test_handshake_agrees_version_and_capabilities():
    client, server = CoreConnection(Role.CLIENT), CoreConnection(Role.SERVER)
    assert client.our_phase is Phase.IDLE
    data = client.send(Connect([1, 2], ["topology", "large-messages", "x-unknown"], "user", "pw", "c1", 5000))
    assert data.startswith(PREAMBLE)
    assert client.our_phase is Phase.CONNECTING
    [connect] = feed(server, data)
    assert connect == Connect([1, 2], ["topology", "large-messages", "x-unknown"], "user", "pw", "c1", 5000)
    assert server.their_phase is Phase.OPEN and server.our_phase is Phase.CONNECTING
    assert server.accept(connect) == 1
    assert server.capabilities == {"topology", "large-messages"}
    [connected] = feed(client, server.send(Connected(1, sorted(server.capabilities), "Petrel", "n1", "c", 30000)))
    assert connected.ttl == 30000
    assert client.version == 1 and client.capabilities == {"topology", "large-messages"}
    assert client.our_phase is Phase.OPEN and server.our_phase is Phase.OPEN


def test_no_common_version():
    server = CoreConnection(Role.SERVER)
    [connect] = feed(server, CoreConnection(Role.CLIENT).send(Connect([7, 8])))
    assert server.accept(connect) is None
    assert server.version is None
    data = server.send(Error(2, "no common version"))
    assert server.our_phase is Phase.CLOSED
    client = CoreConnection(Role.CLIENT)
    client.send(Connect([1]))
    assert feed(client, data) == [Error(2, "no common version")]


def test_client_refuses_a_version_it_did_not_offer():
    client = CoreConnection(Role.CLIENT, versions=(1,))
    client.send(Connect([1]))
    server = CoreConnection(Role.SERVER, versions=(1, 2))
    server.receive_data(CoreConnection(Role.CLIENT).send(Connect([2])))
    server.accept(server.next_event())
    with pytest.raises(RemoteProtocolError, match="version 2"):
        feed(client, server.send(Connected(2)))


def test_server_cannot_send_a_version_it_does_not_speak():
    server = CoreConnection(Role.SERVER)
    feed(server, CoreConnection(Role.CLIENT).send(Connect([1])))
    with pytest.raises(LocalProtocolError):
        server.send(Connected(5))
    assert server.our_phase is Phase.CONNECTING


# -- every frame: whole, byte by byte, with trailing bytes --------------------------------------


@pytest.mark.parametrize("mode", ["whole", "bytewise", "trailing"])
def test_client_frames(mode):
    client, server = pair()
    data = b"".join(client.send(e) for e in CLIENT_SAMPLES)
    if mode == "whole":
        got = feed(server, data)
    elif mode == "bytewise":
        got = feed(server, data, chunk=1)
    else:
        tail = client.send(Ping(99))
        got = feed(server, data + tail[:-1])
        assert server.buffered_bytes == len(tail) - 1
        got2 = feed(server, tail[-1:])
        assert got2 == [Ping(99)]
    assert got == CLIENT_SAMPLES


@pytest.mark.parametrize("mode", ["whole", "bytewise", "trailing"])
def test_server_frames(mode):
    client, server = pair()
    data = b"".join(server.send(e) for e in SERVER_SAMPLES)
    if mode == "whole":
        got = feed(client, data)
    elif mode == "bytewise":
        got = feed(client, data, chunk=1)
    else:
        tail = server.send(SendConfirm(1, 5))
        got = feed(client, data + tail[:3])
        assert feed(client, tail[3:]) == [SendConfirm(1, 5)]
    assert got == SERVER_SAMPLES


def test_preamble_byte_by_byte_then_frames():
    client = CoreConnection(Role.CLIENT)
    data = client.send(Connect([1])) + encode_frame(Ping(1))
    server = CoreConnection(Role.SERVER)
    events = feed(server, data, chunk=1)
    assert events == [Connect([1]), Ping(1)]


def test_every_registered_type_has_a_sample():
    sampled = {type(e).TYPE for e in CLIENT_SAMPLES + SERVER_SAMPLES}
    handshake = {FrameType.CONNECT, FrameType.CONNECTED, FrameType.DISCONNECT, FrameType.ERROR}
    assert set(EVENT_TYPES) - sampled == handshake


def test_encode_frame_layout():
    data = encode_frame(Credit(1, 2, 3))
    length, code = HEADER.unpack_from(data)
    assert code == FrameType.CREDIT == 0x28
    assert length == len(data) - 4
    assert decode_payload(code, data[5:]) == Credit(1, 2, 3)
    with pytest.raises(RemoteProtocolError):
        decode_payload(0xEE, data[5:])
    with pytest.raises(RemoteProtocolError):
        decode_payload(FrameType.SEND, data[5:])


def test_send_many_is_the_concatenation():
    client, _ = pair()
    events = [Credit(1, 2, 3), Ping(4)]
    assert client.send_many(events) == encode_frame(events[0]) + encode_frame(events[1])


def test_credit_counts_overhead():
    assert credit_of(0) > 0
    assert credit_of(1000) - credit_of(0) == 1000


# -- state table ------------------------------------------------------------------------------


def test_frames_before_connect_are_refused():
    server = CoreConnection(Role.SERVER)
    with pytest.raises(RemoteProtocolError, match="expected CONNECT"):
        feed(server, PREAMBLE + encode_frame(Ping(1)))


def test_connect_twice_is_refused():
    client, server = pair()
    with pytest.raises(RemoteProtocolError, match="already connected"):
        feed(server, encode_frame(Connect([1])))


def test_client_may_not_send_server_frames():
    client, server = pair()
    with pytest.raises(LocalProtocolError, match="not a frame a client may send"):
        client.send(Deliver(1, 1, 1, 0, 1, "a", False, 4, 0, 0, {}, b"", 0))
    with pytest.raises(RemoteProtocolError, match="not a frame a client may send"):
        feed(server, encode_frame(SendConfirm(1, 1)))


def test_server_may_not_send_client_frames():
    client, server = pair()
    with pytest.raises(LocalProtocolError):
        server.send(Send(1, "a", -1, False, 4, 0, 0, 0, {}, b"", False))
    with pytest.raises(RemoteProtocolError):
        feed(client, encode_frame(Commit(1, 1)))


def test_client_waits_for_connected():
    client = CoreConnection(Role.CLIENT)
    with pytest.raises(LocalProtocolError, match="expected CONNECT"):
        client.send(Ping(1))
    client.send(Connect([1]))
    with pytest.raises(LocalProtocolError, match="before CONNECTED"):
        client.send(Credit(1, 1, 1))
    with pytest.raises(LocalProtocolError):
        client.send(Connect([1]))


def test_server_frames_before_connected_are_refused():
    client = CoreConnection(Role.CLIENT)
    client.send(Connect([1]))
    with pytest.raises(RemoteProtocolError, match="before CONNECTED"):
        feed(client, encode_frame(Ping(1)))


def test_server_sends_nothing_but_refusals_before_connect():
    server = CoreConnection(Role.SERVER)
    with pytest.raises(LocalProtocolError):
        server.send(Connected(1))
    with pytest.raises(LocalProtocolError):
        server.send(Ping(1))
    server.send(Disconnect(1, "shutting down", "127.0.0.1:61617"))
    assert server.our_phase is Phase.CLOSED


def test_disconnect_with_redirect_reaches_the_client():
    client, server = pair()
    event = Disconnect(2, "go elsewhere", "tcp://other:61617")
    assert feed(client, server.send(event)) == [event]
    assert client.their_phase is Phase.CLOSED
    with pytest.raises(RemoteProtocolError, match="after the server closed"):
        feed(client, encode_frame(Ping(1)))


def test_nothing_after_disconnect():
    client, server = pair()
    client.send(Disconnect(0, "bye"))
    assert client.our_phase is Phase.CLOSED
    with pytest.raises(LocalProtocolError, match="after the client closed"):
        client.send(Ping(1))
    feed(server, encode_frame(Disconnect(0, "bye")))
    with pytest.raises(RemoteProtocolError):
        feed(server, encode_frame(Ping(1)))


def test_error_from_server_closes_its_side():
    client, server = pair()
    assert feed(client, server.send(Error(1, "boom"))) == [Error(1, "boom")]
    with pytest.raises(LocalProtocolError):
        server.send(Ping(1))


def test_pings_flow_both_ways_when_open():
    client, server = pair()
    assert feed(server, client.send(Ping(5))) == [Ping(5)]
    assert feed(client, server.send(Pong(5))) == [Pong(5)]
    assert feed(client, server.send(Ping(6))) == [Ping(6)]
    assert feed(server, client.send(Pong(6))) == [Pong(6)]


def test_registered_sets_are_disjoint_except_control_frames():
    both = CLIENT_EVENTS & SERVER_EVENTS
    assert both == {FrameType.PING, FrameType.PONG, FrameType.DISCONNECT, FrameType.ERROR}


# -- errors and limits ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, match",
    [
        (b"GET / HTTP/1.1\r\n", "bad preamble"),
        (b"PETREL\x09\x00", "preamble version"),
        (b"PETRE\x00", "bad preamble"),
    ],
)
def test_bad_preamble(data, match):
    server = CoreConnection(Role.SERVER)
    with pytest.raises(RemoteProtocolError, match=match):
        feed(server, data)


def test_partial_preamble_needs_data():
    server = CoreConnection(Role.SERVER)
    assert feed(server, b"PETR") == []
    server.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        server.next_event()


def test_oversized_frame_refused_before_its_body():
    client = CoreConnection(Role.CLIENT)
    server = CoreConnection(Role.SERVER, max_frame_size=1000)
    feed(server, client.send(Connect([1])))
    server.accept(Connect([1]))
    server.send(Connected(1))
    with pytest.raises(RemoteProtocolError, match="over the 1000-byte limit"):
        feed(server, HEADER.pack(5000, FrameType.SEND) + b"\x00" * 10)


def test_frame_at_the_limit_is_accepted():
    client, server = pair()
    server.max_frame_size = 2000
    frame = client.send(SendChunk(1, b"a" * 1980))
    assert len(frame) - 4 <= 2000
    assert feed(server, frame) == [SendChunk(1, b"a" * 1980)]


def test_zero_length_frame():
    client, server = pair()
    with pytest.raises(RemoteProtocolError, match="at least 1"):
        feed(server, b"\x00\x00\x00\x00\x22")


def test_unknown_frame_type():
    client, server = pair()
    with pytest.raises(RemoteProtocolError, match="unknown frame type 0x9f"):
        feed(server, HEADER.pack(2, 0x9F) + b"\x90")


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x92\x01\x02", b"\x93\x01\x02\xa1x", b"\xc1", b"\x93\x01\x02", b"\x91\xa1x", b"\x81\x01\x02"],
)
def test_malformed_payload(payload):
    client, server = pair()
    with pytest.raises(RemoteProtocolError, match="malformed CREDIT"):
        feed(server, HEADER.pack(len(payload) + 1, FrameType.CREDIT) + payload)


def test_extra_trailing_fields_are_ignored():
    """Newer versions may append fields; an older peer reads the ones it knows."""
    client, server = pair()
    payload = b"\x94\x01\x02\x03\xa3new"
    assert feed(server, HEADER.pack(len(payload) + 1, FrameType.CREDIT) + payload) == [Credit(1, 2, 3)]


def test_non_scalar_property_values_are_refused():
    client, server = pair()
    bad = Send(1, "a", -1, False, 4, 0, 0, 0, {"nested": [1, 2]}, b"", False)
    with pytest.raises(RemoteProtocolError, match="scalars"):
        feed(server, encode_frame(bad))


def test_unsendable_events_are_refused_locally():
    client, server = pair()
    with pytest.raises(LocalProtocolError, match="scalars"):
        client.send(Send(1, "a", -1, False, 4, 0, 0, 0, {"k": {1, 2}}, b"", False))
    with pytest.raises(LocalProtocolError, match="cannot encode"):
        client.send(Credit(1, 2, 2**70))
    with pytest.raises(LocalProtocolError, match="scalars"):
        server.send(Deliver(1, 1, 1, 0, 1, "a", False, 4, 0, 0, {"k": [1]}, b"", 0))
    assert client.our_phase is Phase.OPEN


def test_non_string_property_keys_are_refused():
    import msgspec

    client, server = pair()
    payload = msgspec.msgpack.encode([1, "a", -1, False, 4, 0, 0, 0, {1: "x"}, b"", False])
    with pytest.raises(RemoteProtocolError, match="malformed SEND"):
        feed(server, HEADER.pack(len(payload) + 1, FrameType.SEND) + payload)


def test_failed_connection_stays_failed_but_can_send_error():
    client, server = pair()
    with pytest.raises(RemoteProtocolError) as first:
        feed(server, HEADER.pack(2, 0x9F) + b"\x90")
    server.receive_data(client.send(Ping(1)))
    with pytest.raises(RemoteProtocolError) as again:
        server.next_event()
    assert again.value is first.value
    assert server.send(Error(2, first.value.message))


def test_eof_between_frames_is_clean():
    client, server = pair()
    server.receive_data(client.send(Ping(1)))
    server.receive_data(b"")
    assert server.they_closed
    assert drain(server) == [Ping(1)]
    with pytest.raises(LocalProtocolError):
        server.receive_data(b"more")


def test_eof_mid_frame_is_an_error():
    client, server = pair()
    server.receive_data(client.send(Ping(1))[:-1])
    server.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        server.next_event()


# -- room for later subsystems ---------------------------------------------------------------


class ExtensionHello(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = 0x80
    node_id: str


def test_register_an_extension_frame():
    register(ExtensionHello, client=True, server=False)
    try:
        client, server = pair()
        assert feed(server, client.send(ExtensionHello("n2"))) == [ExtensionHello("n2")]
        with pytest.raises(LocalProtocolError):
            server.send(ExtensionHello("n1"))
    finally:
        EVENT_TYPES.pop(0x80)
        CLIENT_EVENTS.discard(0x80)


def test_register_checks_ranges_and_collisions():
    class Taken(Event, frozen=True, array_like=True):
        TYPE: ClassVar[int] = FrameType.SEND

    class Outside(Event, frozen=True, array_like=True):
        TYPE: ClassVar[int] = 0x100

    with pytest.raises(ValueError, match="already"):
        register(Taken, client=True, server=False)
    with pytest.raises(ValueError, match="outside"):
        register(Outside, client=True, server=False)
