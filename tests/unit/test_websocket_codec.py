"""The WebSocket codec (server side): the opening handshake and client frames, whole, byte by byte,
with trailing bytes and fuzzed; the choice of protocol from the path and the sub-protocols; ws_port."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.codec.buffer import Buffer
from petrel.codec.websocket import (
    NEED_DATA,
    Close,
    CloseCode,
    Data,
    FrameDecoder,
    FrameError,
    HandshakeError,
    Opcode,
    Ping,
    Pong,
    accept_key,
    accept_response,
    check_upgrade,
    close_payload,
    frame,
    parse_request,
    refusal_response,
    unmask,
)
from petrel.config import BrokerConfig
from petrel.server.websocket import choose

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def client_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = None, rsv: int = 0) -> bytes:
    """A frame as a client sends it (masked), built here independently of the decoder."""
    mask = os.urandom(4) if mask is None else mask
    n = len(payload)
    head = bytes(((0x80 if fin else 0) | rsv | opcode,))
    if n < 126:
        head += bytes((0x80 | n,))
    elif n < 65536:
        head += bytes((0x80 | 126,)) + n.to_bytes(2, "big")
    else:
        head += bytes((0x80 | 127,)) + n.to_bytes(8, "big")
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


def events(decoder: FrameDecoder) -> list:
    out = []
    while (event := decoder.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def messages(evts: list) -> list:
    """Data pieces joined into (text, payload) messages; control events as they are."""
    out, piece = [], b""
    for event in evts:
        if isinstance(event, Data):
            piece += event.payload
            if event.end:
                out.append((event.text, piece))
                piece = b""
        else:
            out.append(event)
    return out


STREAM = (client_frame(Opcode.TEXT, b"CONNECT\naccept-version:1.2\n\n\x00")
          + client_frame(Opcode.PING, b"are you there")
          + client_frame(Opcode.BINARY, b"\x10" * 200, fin=False)
          + client_frame(Opcode.PONG, b"")
          + client_frame(Opcode.CONTINUATION, b"", fin=False)
          + client_frame(Opcode.CONTINUATION, bytes(range(256)) * 300)
          + client_frame(Opcode.TEXT, "é😀".encode() * 50)
          + client_frame(Opcode.CLOSE, close_payload(1000, "bye")))
EXPECTED = [(True, b"CONNECT\naccept-version:1.2\n\n\x00"), Ping(b"are you there"), Pong(b""),
            (False, b"\x10" * 200 + bytes(range(256)) * 300), (True, "é😀".encode() * 50), Close(1000, "bye")]


def test_frames_whole_byte_by_byte_and_with_trailing_bytes():
    whole = FrameDecoder()
    whole.receive_data(STREAM + b"trailing garbage after the close")
    assert messages(events(whole)) == EXPECTED

    bytewise, evts = FrameDecoder(), []
    for i in range(len(STREAM)):
        bytewise.receive_data(STREAM[i:i + 1])
        evts += events(bytewise)
    assert messages(evts) == EXPECTED
    # a data message streams out as it arrives: the decoder holds no payload
    assert bytewise.buffered_bytes == 0


def test_unmask_at_any_offset_matches_bytewise_xor():
    data, mask = os.urandom(1001), b"\x01\x80\xfe\x37"
    want = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    assert unmask(data, mask) == want
    for cut in (1, 2, 3, 5, 500):
        assert unmask(data[:cut], mask) + unmask(data[cut:], mask, cut) == want


FORBIDDEN = [  # random masks: the ids are the case numbers, the same in every xdist worker
    (client_frame(Opcode.TEXT, b"x", rsv=0x40), CloseCode.PROTOCOL_ERROR),  # no extension negotiated
    (bytes((0x81, 0x01)) + b"x", CloseCode.PROTOCOL_ERROR),  # not masked
    (client_frame(0x3, b""), CloseCode.PROTOCOL_ERROR),  # reserved opcode
    (client_frame(Opcode.CONTINUATION, b"x"), CloseCode.PROTOCOL_ERROR),  # nothing to continue
    (client_frame(Opcode.TEXT, b"a", fin=False) + client_frame(Opcode.BINARY, b"b"), CloseCode.PROTOCOL_ERROR),
    (client_frame(Opcode.PING, b"x", fin=False), CloseCode.PROTOCOL_ERROR),  # fragmented control
    (client_frame(Opcode.PING, b"x" * 126), CloseCode.PROTOCOL_ERROR),  # long control
    (client_frame(Opcode.TEXT, b"\xff\xfe"), CloseCode.INVALID_FRAME_PAYLOAD_DATA),
    (client_frame(Opcode.TEXT, b"\xc3", fin=True), CloseCode.INVALID_FRAME_PAYLOAD_DATA),  # cut character
    (client_frame(Opcode.CLOSE, b"\x03"), CloseCode.PROTOCOL_ERROR),  # 1-byte close body
    (client_frame(Opcode.CLOSE, (1005).to_bytes(2, "big")), CloseCode.PROTOCOL_ERROR),  # reserved code
    (client_frame(Opcode.CLOSE, (1000).to_bytes(2, "big") + b"\xff"), CloseCode.INVALID_FRAME_PAYLOAD_DATA),
    (bytes((0x82, 0xFF)) + b"\x80" + bytes(7) + bytes(4), CloseCode.PROTOCOL_ERROR),  # length over 2**63
]


@pytest.mark.parametrize("raw, code", FORBIDDEN, ids=[f"case{i}" for i in range(len(FORBIDDEN))])
def test_what_rfc6455_forbids_is_a_frame_error_with_its_close_code(raw: bytes, code: int):
    decoder = FrameDecoder()
    decoder.receive_data(raw)
    with pytest.raises(FrameError) as info:
        events(decoder)
    assert info.value.code == code


def test_a_close_without_code_and_nothing_read_after_it():
    decoder = FrameDecoder()
    decoder.receive_data(client_frame(Opcode.CLOSE, b"") + client_frame(Opcode.TEXT, b"late"))
    assert events(decoder) == [Close(None, "")]


TOKENS = [client_frame(Opcode.TEXT, b"SEND\n\n\x00"), client_frame(Opcode.BINARY, b"\x30\x00", fin=False),
          client_frame(Opcode.CONTINUATION, b"more"), client_frame(Opcode.PING, b"p"),
          client_frame(Opcode.CLOSE, b"\x03\xe8"), bytes((0x81, 0xFE, 0xFF)), bytes((0x82, 0xFF)),
          b"\x80", b"\x00", b"\xff"]


@SETTINGS
@given(st.lists(st.one_of(st.binary(max_size=40), st.sampled_from(TOKENS)), max_size=12),
       st.lists(st.integers(min_value=0, max_value=600), max_size=6))
def test_any_bytes_give_events_or_a_frame_error(parts: list[bytes], cuts: list[int]):
    data = b"".join(parts)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    decoder = FrameDecoder()
    try:
        for a, b in zip(points, points[1:]):
            decoder.receive_data(data[a:b])
            for event in events(decoder):
                assert isinstance(event, (Data, Ping, Pong, Close))
    except FrameError as exc:
        assert 1000 <= exc.code <= 1011


@SETTINGS
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=300)), min_size=1, max_size=5),
       st.integers(min_value=1, max_value=50))
def test_messages_round_trip_in_any_fragmentation(msgs: list[tuple[bool, bytes]], step: int):
    raw, want = b"", []
    for text, body in msgs:
        body = body.decode("latin-1").encode("utf-8") if text else body
        half = len(body) // 2
        raw += client_frame(Opcode.TEXT if text else Opcode.BINARY, body[:half], fin=False)
        raw += client_frame(Opcode.CONTINUATION, body[half:])
        want.append((text, body))
    decoder, evts = FrameDecoder(), []
    for i in range(0, len(raw), step):
        decoder.receive_data(raw[i:i + step])
        evts += events(decoder)
    assert messages(evts) == want


# -- the opening handshake ------------------------------------------------------------------------

def request(path: str = "/stomp", *, protocols: str | None = "v12.stomp", **extra: str) -> bytes:
    headers = {"Host": "localhost:61614", "Upgrade": "websocket", "Connection": "keep-alive, Upgrade",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
    if protocols is not None:
        headers["Sec-WebSocket-Protocol"] = protocols
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    lines = [f"GET {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def parsed(raw: bytes):
    buf = Buffer()
    buf.feed(raw)
    return parse_request(buf)


def test_the_rfc_example_key_and_the_101():
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    response = accept_response("dGhlIHNhbXBsZSBub25jZQ==", "v12.stomp")
    assert response.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"\r\nSec-WebSocket-Protocol: v12.stomp\r\n" in response and response.endswith(b"\r\n\r\n")
    assert b"Sec-WebSocket-Protocol" not in accept_response("dGhlIHNhbXBsZSBub25jZQ==", None)


def test_request_whole_byte_by_byte_and_with_frames_behind_it():
    raw = request()
    assert check_upgrade(parsed(raw)) == "dGhlIHNhbXBsZSBub25jZQ=="
    buf = Buffer()
    for i in range(len(raw) - 1):
        buf.feed(raw[i:i + 1])
        assert parse_request(buf) is None
    buf.feed(raw[-1:] + b"\x81\x80....")
    assert parse_request(buf).subprotocols == ["v12.stomp"]
    assert buf.consume_at_most(len(buf)) == b"\x81\x80...."


@pytest.mark.parametrize("raw, status", [
    (request().replace(b"GET", b"POST"), 405),
    (request(Upgrade=None), 426),
    (request(Sec_WebSocket_Version="8"), 426),
    (request(Connection="keep-alive"), 400),
    (request(Sec_WebSocket_Key="short"), 400),
    (request().replace(b"HTTP/1.1", b"HTTP/1.0", 1), 505),
    (b"HELLO\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400),
])
def test_requests_that_are_no_websocket_handshake_are_refused_with_a_status(raw: bytes, status: int):
    with pytest.raises(HandshakeError) as info:
        check_upgrade(parsed(raw))
    assert info.value.status == status
    answer = refusal_response(info.value.status, info.value.message, info.value.headers)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()) and answer.endswith(info.value.message.encode() + b"\n")


def test_an_endless_request_head_is_refused():
    buf = Buffer()
    buf.feed(b"GET / HTTP/1.1\r\n" + b"X-Filler: aaaaaaaa\r\n" * 2000)
    with pytest.raises(HandshakeError) as info:
        parse_request(buf)
    assert info.value.status == 431


@SETTINGS
@given(st.binary(max_size=300))
def test_any_request_bytes_give_a_request_none_or_a_handshake_error(raw: bytes):
    try:
        req = parsed(raw)
        if req is not None:
            check_upgrade(req)
    except HandshakeError as exc:
        assert 400 <= exc.status < 600


# -- the protocol a client gets -----------------------------------------------------------------

BOTH = ("core", "stomp", "mqtt")


@pytest.mark.parametrize("path, offers, registered, want", [
    ("/stomp", "v12.stomp", BOTH, ("stomp", "v12.stomp")),
    ("/", "mqtt", BOTH, ("mqtt", "mqtt")),
    ("/mqtt", "mqttv3.1", BOTH, ("mqtt", "mqttv3.1")),
    ("/", "foo, v10.stomp, mqtt", BOTH, ("stomp", "v10.stomp")),  # the client's order
    ("/stomp/", "mqtt, stomp", BOTH, ("stomp", "stomp")),  # the path rules out mqtt
    ("/stomp?x=1", None, BOTH, ("stomp", None)),  # no offer: the path says it
    ("/", "V11.STOMP", BOTH, ("stomp", "V11.STOMP")),  # answered as offered
    ("/amqp", None, BOTH + ("amqp",), ("amqp", None)),
    ("/", "amqp", BOTH + ("amqp",), ("amqp", "amqp")),
])
def test_the_protocol_comes_from_the_sub_protocol_and_the_path(path, offers, registered, want):
    assert choose(parsed(request(path, protocols=offers)), registered) == want


@pytest.mark.parametrize("path, offers, registered, status", [
    ("/", None, BOTH, 400),  # no offer and no path to say it
    ("/", "foo, bar", BOTH, 400),
    ("/stomp", "mqtt", BOTH, 400),
    ("/amqp", "v12.stomp", BOTH, 404),
    ("/mqtt", "mqtt", ("core", "stomp"), 404),  # MQTT not registered: not served
    ("/", "mqtt", ("core", "stomp"), 400),
])
def test_no_fitting_sub_protocol_or_path_is_an_http_error(path, offers, registered, status):
    with pytest.raises(HandshakeError) as info:
        choose(parsed(request(path, protocols=offers)), registered)
    assert info.value.status == status


def test_ws_port_is_61614_on_a_standard_broker_and_follows_the_offset():
    assert BrokerConfig().protocol_port("ws_port", 61614) == 61614
    assert BrokerConfig(port_offset=100).protocol_port("ws_port", 61614) == 61714
    assert BrokerConfig(port=0).protocol_port("ws_port", 61614) == -1  # a test's broker: off unless asked
    assert BrokerConfig(ws_port=0).protocol_port("ws_port", 61614) == 0
    assert BrokerConfig(ws_port=-1).protocol_port("ws_port", 61614) == -1
    assert BrokerConfig(ws_port=8080, port_offset=1).protocol_port("ws_port", 61614) == 8081
    with pytest.raises(ValueError, match="ws_port"):
        BrokerConfig(ws_port=65535, port_offset=1)


def test_a_colocated_backup_shifts_a_set_ws_port_and_leaves_an_unset_one_off():
    from petrel.ha.colocated import colocated_configs

    def backup(**ports) -> BrokerConfig:
        config = BrokerConfig(cluster_user="u", cluster_password="p", **ports, ha_policy={
            "replication": "primary", "colocated": {"max_backups": 1, "backup_port_offset": 100}},
            cluster_connections=[{"connector": "tcp://127.0.0.1:61616",
                                  "static_connectors": ["tcp://127.0.0.1:61617"]}])
        return colocated_configs(config)[0]

    assert backup(ws_port=61614).protocol_port("ws_port", 61614) == 61714  # not the live's 61614
    assert backup().protocol_port("ws_port", 61614) == -1  # the live's standard 61614 only
    assert backup(ws_port=-1).protocol_port("ws_port", 61614) == -1
