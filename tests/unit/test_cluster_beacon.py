"""The UDP announcement codec: round trips, and ValueError (only) on anything malformed."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.cluster.beacon import MAGIC, MAX_PACKET, VERSION, Announcement, decode, encode

A = Announcement("node-1", "run-7", "petrel-cluster", ("10.0.0.1:61616", "tcp://[::1]:61617"),
                 "http://10.0.0.1:8161")


def body(*fields) -> bytes:
    return MAGIC + bytes([VERSION]) + msgspec.msgpack.encode(list(fields))


def test_round_trip():
    data = encode(A)
    assert data.startswith(MAGIC + bytes([VERSION]))
    assert decode(data) == A
    assert decode(bytearray(data)) == A
    assert decode(memoryview(data)) == A


def test_round_trip_without_connectors_or_http_and_with_unicode():
    a = Announcement("nœud-ü", "ünique", "grappe", (), None)
    assert decode(encode(a)) == a


def test_connectors_given_as_list_become_a_tuple():
    a = Announcement("n", "u", "c", ["127.0.0.1:1"])  # type: ignore[arg-type]
    assert a.connectors == ("127.0.0.1:1",)
    assert hash(a) == hash(decode(encode(a)))


@pytest.mark.parametrize("field", ["node_id", "unique_id", "cluster"])
def test_empty_ids_are_refused(field):
    kwargs = dict(node_id="n", unique_id="u", cluster="c", connectors=())
    kwargs[field] = ""
    with pytest.raises(ValueError, match=field):
        Announcement(**kwargs)


def test_bad_connector_is_refused_on_both_sides():
    with pytest.raises(ValueError, match="no-port"):
        Announcement("n", "u", "c", ("no-port",))
    with pytest.raises(ValueError, match="malformed.*no-port"):
        decode(body("n", "u", "c", ["no-port"], None))


def test_every_truncation_is_a_value_error():
    data = encode(A)
    for n in range(len(data)):
        with pytest.raises(ValueError):
            decode(data[:n])


def test_truncated_magic_and_empty_packet_say_truncated():
    with pytest.raises(ValueError, match="truncated"):
        decode(b"")
    with pytest.raises(ValueError, match="truncated"):
        decode(MAGIC[:3])
    with pytest.raises(ValueError, match="no version byte"):
        decode(MAGIC)


def test_wrong_magic():
    data = encode(A)
    with pytest.raises(ValueError, match="bad magic"):
        decode(b"X" + data[1:])
    with pytest.raises(ValueError, match="bad magic"):
        decode(b"GET / HTTP/1.1\r\n\r\n")


def test_unknown_version_says_what_to_do():
    data = bytearray(encode(A))
    data[len(MAGIC)] = VERSION + 1
    with pytest.raises(ValueError, match=rf"version {VERSION + 1}.*same petrel version"):
        decode(bytes(data))


def test_trailing_bytes_are_refused():
    with pytest.raises(ValueError, match="malformed"):
        decode(encode(A) + b"\x00")


@pytest.mark.parametrize("fields", [
    (1, "u", "c", [], None),
    ("n", "u", "c", "10.0.0.1:1", None),
    ("n", "u", "c", [1], None),
    ("n", "u", "c", [], 5),
    ("n", "u", "c", []),
    ("n", "u", "c", [], None, "extra"),
    ("", "u", "c", [], None),
    ("n", "u", "c", [], ""),
])
def test_wrong_shapes_are_value_errors(fields):
    with pytest.raises(ValueError, match="malformed"):
        decode(body(*fields))


def test_invalid_utf8_is_a_value_error():
    raw = bytearray(encode(Announcement("nX", "u", "c", ())))
    raw[raw.index(b"nX") + 1] = 0xFF
    with pytest.raises(ValueError, match="malformed"):
        decode(bytes(raw))


def test_oversized_announcement_cannot_be_encoded():
    a = Announcement("n", "u", "c", tuple(f"host-{i:06d}.example.com:61616" for i in range(3000)))
    with pytest.raises(ValueError, match="UDP limit"):
        encode(a)
    assert len(encode(Announcement("n", "u", "c", a.connectors[:100]))) < MAX_PACKET


def _check_any(data: bytes) -> None:
    try:
        result = decode(data)
    except ValueError:
        return
    assert isinstance(result, Announcement)
    assert decode(encode(result)) == result


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_any_bytes(data):
    _check_any(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_bytes_after_a_valid_header(data):
    _check_any(MAGIC + bytes([VERSION]) + data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_fuzz_corrupted_packets(pos, noise):
    data = bytearray(encode(A))
    pos %= len(data)
    data[pos:pos + len(noise)] = noise
    _check_any(bytes(data))


ident = st.text(min_size=1, max_size=40)
host = st.from_regex(r"[a-z0-9.-]{1,20}", fullmatch=True)
connector = st.builds(lambda h, p: f"{h}:{p}", host, st.integers(1, 65535))


@settings(max_examples=200, deadline=None)
@given(ident, ident, ident, st.lists(connector, max_size=5), st.none() | ident)
def test_round_trip_property(node_id, unique_id, cluster, connectors, http):
    a = Announcement(node_id, unique_id, cluster, tuple(connectors), http)
    assert decode(encode(a)) == a
