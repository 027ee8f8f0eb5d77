"""STOMP codec: escaping per version, what each side may send, version and heart-beat negotiation."""

from __future__ import annotations

import pytest

from petrel.codec.errors import LocalProtocolError, RemoteProtocolError
from petrel.codec.stomp import (
    CLIENT_COMMANDS,
    SERVER_COMMANDS,
    Frame,
    Phase,
    Role,
    StompConnection,
    format_heartbeat,
    negotiate_heartbeat,
    parse_heartbeat,
)

from stomp_codec_harness import client, drain, feed, pair, raises_remote, server

VERSIONS = ["1.0", "1.1", "1.2"]

# -- escaping --------------------------------------------------------------------------------

TRICKY = "a:b\\c\nd\re"


@pytest.mark.parametrize(
    "version, wire",
    [
        ("1.1", b"SEND\nk\\cey:a\\cb\\\\c\\nd\re\n\n\x00"),
        ("1.2", b"SEND\nk\\cey:a\\cb\\\\c\\nd\\re\n\n\x00"),
    ],
)
def test_escaping_on_the_wire(version, wire):
    c = client(version)
    assert c.send(Frame("SEND", {"k:ey": TRICKY})) == wire
    s = server(version)
    assert feed(s, wire) == [Frame("SEND", {"k:ey": TRICKY})]


def test_stomp_10_has_no_escaping():
    c = client("1.0")
    wire = c.send(Frame("SEND", {"destination": "/queue/a:b\\c", "x": "p\\nq"}))
    assert wire == b"SEND\ndestination:/queue/a:b\\c\nx:p\\nq\n\n\x00"
    s = server("1.0")
    assert feed(s, wire)[0].headers == {"destination": "/queue/a:b\\c", "x": "p\\nq"}
    with pytest.raises(LocalProtocolError, match="cannot be sent unescaped"):
        c.send(Frame("SEND", {"x": "line\nbreak"}))
    with pytest.raises(LocalProtocolError, match="cannot be sent unescaped"):
        c.send(Frame("SEND", {"na:me": "v"}))


@pytest.mark.parametrize("version", VERSIONS)
def test_escaping_round_trips_both_ways(version):
    c, s = pair(version)
    if version == "1.0":
        headers = {"destination": "/queue/x:y", "weird\\name": "back\\slash\ttab\rcr-inside"}
    elif version == "1.1":
        headers = {"destination": "/queue/x:y", "we:ird\nname\\": "a\nb:c\\d\re"}
    else:
        headers = {"destination": "/queue/x:y", "we:ird\r\nname\\": "a\nb:c\\d\re\r"}
    s.receive_data(c.send(Frame("SEND", headers, b"body")))
    [got] = drain(s)
    assert got == Frame("SEND", {**headers, "content-length": "4"}, b"body")
    c.receive_data(s.send(Frame("MESSAGE", headers, b"")))
    [got] = drain(c)
    assert got == Frame("MESSAGE", headers)


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_escaped_header_names_and_first_value_wins(version):
    s = server(version)
    [frame] = feed(s, b"SEND\na\\cb:1\na\\cb:2\nplain:x\nplain:y\n\n\x00")
    assert frame.headers == {"a:b": "1", "plain": "x"}


def test_repeated_header_first_wins_unescaped():
    s = server("1.0")
    [frame] = feed(s, b"SEND\ndestination:/a\ndestination:/b\ncontent-length:2\ncontent-length:9\n\nhi\x00")
    assert frame.headers == {"destination": "/a", "content-length": "2"}
    assert frame.body == b"hi"


@pytest.mark.parametrize("escape", [b"\\t", b"\\x", b"\\"])
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_undefined_escape_is_an_error(version, escape):
    s = server(version)
    raises_remote(s, b"SEND\ndestination:/q" + escape + b"\n\n\x00", "escape")


def test_cr_escape_is_only_defined_in_12():
    raises_remote(server("1.1"), b"SEND\nx:a\\rb\n\n\x00", "escape", "1.1")
    assert feed(server("1.2"), b"SEND\nx:a\\rb\n\n\x00")[0].headers == {"x": "a\rb"}


def test_undefined_escape_in_a_repeated_header_is_still_an_error():
    raises_remote(server("1.2"), b"SEND\nx:1\nx:\\q\n\n\x00", "escape")


def test_headers_are_not_unescaped_before_negotiation():
    s = server(None)  # CONNECT received but negotiate() not called yet
    [frame] = feed(s, b"SEND\nx:a\\cb\\t\n\n\x00")
    assert frame.headers == {"x": "a\\cb\\t"}


@pytest.mark.parametrize("command", ["CONNECT", "STOMP"])
def test_connect_is_never_unescaped(command):
    s = StompConnection(Role.SERVER)
    [frame] = feed(s, command.encode() + b"\naccept-version:1.2\nlogin:a\\cb\\t\n\n\x00")
    assert frame.headers["login"] == "a\\cb\\t"


def test_connected_is_never_escaped_or_unescaped():
    s = server("1.2")
    wire = s.send(Frame("CONNECTED", {"server": "petrel:1\\x"}))
    assert b"server:petrel:1\\x\n" in wire
    c = StompConnection(Role.CLIENT)
    c.send(Frame("CONNECT", {"accept-version": "1.2"}))
    [frame] = feed(c, wire)
    assert frame.headers == {"server": "petrel:1\\x", "version": "1.2"}
    # ... but later frames are escaped in both directions.
    assert c.send(Frame("SEND", {"d": "x:y"})) == b"SEND\nd:x\\cy\n\n\x00"


def test_connect_and_connected_refuse_unencodable_headers():
    c = StompConnection(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        c.send(Frame("CONNECT", {"login": "two\nlines"}))
    s = server("1.2")
    with pytest.raises(LocalProtocolError):
        s.send(Frame("CONNECTED", {"bad:name": "x"}))
    # The failed sends changed nothing.
    assert c.our_phase is Phase.IDLE
    assert s.our_phase is Phase.CONNECTING
    s.send(Frame("CONNECTED", {}))
    assert s.our_phase is Phase.OPEN


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_value_ending_in_cr_cannot_be_sent_without_cr_escape(version):
    c = client(version)
    with pytest.raises(LocalProtocolError):
        c.send(Frame("SEND", {"x": "ends\r"}))
    # CR elsewhere in a value is fine and survives.
    s = server(version)
    [frame] = feed(s, c.send(Frame("SEND", {"x": "a\rb"})))
    assert frame.headers == {"x": "a\rb"}


@pytest.mark.parametrize("version", VERSIONS)
def test_nul_and_empty_names_cannot_be_sent(version):
    c = client(version)
    with pytest.raises(LocalProtocolError):
        c.send(Frame("SEND", {"x": "a\x00b"}))
    with pytest.raises(LocalProtocolError):
        c.send(Frame("SEND", {"": "v"}))


# -- sending ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(SERVER_COMMANDS))
def test_client_cannot_send_server_commands(command):
    c = client()
    with pytest.raises(LocalProtocolError, match=command):
        c.send(Frame(command, {}))


@pytest.mark.parametrize("command", sorted(CLIENT_COMMANDS))
def test_server_cannot_send_client_commands(command):
    s = server()
    s.send(Frame("CONNECTED", {}))
    with pytest.raises(LocalProtocolError, match=command):
        s.send(Frame(command, {}))


def test_unknown_command_cannot_be_sent():
    with pytest.raises(LocalProtocolError):
        client().send(Frame("FROB", {}))


def test_server_send_order():
    s = StompConnection(Role.SERVER)
    with pytest.raises(LocalProtocolError, match="before a CONNECT"):
        s.send(Frame("CONNECTED", {}))
    feed(s, b"CONNECT\n\n\x00")
    with pytest.raises(LocalProtocolError, match="expected CONNECTED"):
        s.send(Frame("MESSAGE", {}))
    s.negotiate(None)
    s.send(Frame("CONNECTED", {}))
    s.send(Frame("MESSAGE", {"destination": "/q"}, b"m"))
    s.send(Frame("RECEIPT", {"receipt-id": "1"}))
    with pytest.raises(LocalProtocolError, match="already connected"):
        s.send(Frame("CONNECTED", {}))
    s.send(Frame("ERROR", {"message": "bye"}))
    assert s.our_phase is Phase.CLOSED
    with pytest.raises(LocalProtocolError):
        s.send(Frame("RECEIPT", {"receipt-id": "2"}))


def test_server_may_send_receipt_after_disconnect():
    s = server()
    s.send(Frame("CONNECTED", {}))
    feed(s, b"DISCONNECT\nreceipt:9\n\n\x00")
    assert s.send(Frame("RECEIPT", {"receipt-id": "9"})) == b"RECEIPT\nreceipt-id:9\n\n\x00"


def test_client_send_order():
    c = StompConnection(Role.CLIENT)
    with pytest.raises(LocalProtocolError, match="expected CONNECT or STOMP"):
        c.send(Frame("SEND", {}))
    c.send(Frame("STOMP", {"accept-version": "1.1,1.2"}))
    with pytest.raises(LocalProtocolError, match="before CONNECTED"):
        c.send(Frame("SEND", {}))
    feed(c, b"CONNECTED\nversion:1.1\n\n\x00")
    assert c.version == "1.1" and c.our_phase is Phase.OPEN
    c.send(Frame("SEND", {"destination": "/q"}))
    c.send(Frame("DISCONNECT", {}))
    with pytest.raises(LocalProtocolError, match="after DISCONNECT"):
        c.send(Frame("SEND", {}))


def test_content_length_is_added_to_non_empty_bodies():
    s = server("1.2")
    s.send(Frame("CONNECTED", {}))
    assert s.send(Frame("MESSAGE", {"d": "q"}, b"abc")) == b"MESSAGE\nd:q\ncontent-length:3\n\nabc\x00"
    assert s.send(Frame("MESSAGE", {"d": "q"})) == b"MESSAGE\nd:q\n\n\x00"
    assert s.send(Frame("MESSAGE", {}, b"\x00")) == b"MESSAGE\ncontent-length:1\n\n\x00\x00"
    given = Frame("MESSAGE", {"content-length": "3"}, b"abc")
    assert s.send(given) == b"MESSAGE\ncontent-length:3\n\nabc\x00"
    with pytest.raises(LocalProtocolError, match="content-length"):
        s.send(Frame("MESSAGE", {"content-length": "2"}, b"abc"))
    with pytest.raises(LocalProtocolError, match="content-length"):
        s.send(Frame("MESSAGE", {"content-length": "2"}, b""))


def test_no_content_length_on_connect_frames():
    c = StompConnection(Role.CLIENT)
    assert c.send(Frame("CONNECT", {"accept-version": "1.2"}, b"hi")) == (
        b"CONNECT\naccept-version:1.2\n\nhi\x00"
    )
    c = StompConnection(Role.CLIENT)
    with pytest.raises(LocalProtocolError, match="NUL"):
        c.send(Frame("CONNECT", {}, b"a\x00b"))
    s = server("1.2")
    assert s.send(Frame("CONNECTED", {"version": "1.2"}, b"x")) == b"CONNECTED\nversion:1.2\n\nx\x00"


def test_connected_version_header():
    s = server("1.1")
    with pytest.raises(LocalProtocolError, match="negotiated"):
        s.send(Frame("CONNECTED", {"version": "1.2"}))
    assert b"version:1.1\n" in s.send(Frame("CONNECTED", {}))


def test_header_values_must_be_strings():
    s = server()
    s.send(Frame("CONNECTED", {}))
    with pytest.raises(LocalProtocolError, match="str"):
        s.send(Frame("MESSAGE", {"priority": 4}))  # type: ignore[dict-item]


# -- negotiation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "accept, chosen",
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.1", "1.1"),
        ("1.0,1.1", "1.1"),
        ("1.2,1.0", "1.2"),
        (" 1.1 , 1.0 ", "1.1"),
        ("1.1,1.2,3.0", "1.2"),
        ("2.0", None),
        ("", None),
        ("1.3,0.9", None),
    ],
)
def test_negotiate(accept, chosen):
    s = StompConnection(Role.SERVER)
    feed(s, b"CONNECT\n\n\x00")
    assert s.negotiate(accept) == chosen
    assert s.version == chosen


def test_failed_negotiation_lets_the_server_send_error():
    s = StompConnection(Role.SERVER)
    feed(s, b"CONNECT\naccept-version:9.9\n\n\x00")
    assert s.negotiate("9.9") is None
    wire = s.send(Frame("ERROR", {"version": "1.0,1.1,1.2", "message": "unsupported version"}))
    assert wire.startswith(b"ERROR\nversion:1.0,1.1,1.2\n")


@pytest.mark.parametrize(
    "accept, reply, version",
    [
        ("1.0,1.1,1.2", b"CONNECTED\nversion:1.1\n\n\x00", "1.1"),
        ("1.2", b"CONNECTED\nversion:1.2\n\n\x00", "1.2"),
        (None, b"CONNECTED\n\n\x00", "1.0"),
        ("1.0,1.2", b"CONNECTED\n\n\x00", "1.0"),
    ],
)
def test_client_negotiates_from_connected(accept, reply, version):
    c = StompConnection(Role.CLIENT)
    c.send(Frame("CONNECT", {} if accept is None else {"accept-version": accept}))
    assert c.version is None
    feed(c, reply)
    assert c.version == version


@pytest.mark.parametrize("reply", [b"CONNECTED\nversion:1.1\n\n\x00", b"CONNECTED\nversion:7\n\n\x00"])
def test_client_refuses_a_version_it_did_not_offer(reply):
    c = StompConnection(Role.CLIENT)
    c.send(Frame("CONNECT", {"accept-version": "1.2"}))
    raises_remote(c, reply, "version")


# -- heart-beat helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, parsed",
    [(None, (0, 0)), ("0,0", (0, 0)), ("10000,5000", (10000, 5000)), (" 10 , 20 ", (10, 20)),
     ("007,0", (7, 0))],
)
def test_parse_heartbeat(value, parsed):
    assert parse_heartbeat(value) == parsed


@pytest.mark.parametrize(
    "value", ["", "10", "a,b", "-1,0", "1,2,3", "1;2", "\uff11,2", "1.5,2", ",", "9" * 5000 + ",1",
              "99999999999,0"]
)
def test_parse_heartbeat_refuses_garbage(value):
    with pytest.raises(RemoteProtocolError, match="heart-beat"):
        parse_heartbeat(value)


@pytest.mark.parametrize(
    "client_hb, server_hb, agreed",
    [
        ((0, 0), (10, 10), (0, 0)),  # the client can neither send nor wants beats
        ((10, 0), (0, 20), (0, 20)),  # client sends every max(10, 20); nobody beats to it
        ((0, 50), (30, 0), (50, 0)),  # server beats every max(30, 50); no beats expected
        ((100, 200), (300, 400), (300, 400)),
        ((500, 100), (50, 60), (100, 500)),
        ((10, 10), (0, 0), (0, 0)),  # the server does neither
    ],
)
def test_negotiate_heartbeat(client_hb, server_hb, agreed):
    assert negotiate_heartbeat(client_hb, server_hb) == agreed
    assert format_heartbeat(agreed) == f"{agreed[0]},{agreed[1]}"
