"""The receive buffer under the STOMP codec (petrel.codec.buffer)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.codec.buffer import Buffer


def test_consume_exactly_rollback_commit():
    buf = Buffer()
    buf.feed(b"hello")
    assert buf.consume_exactly(3) == b"hel"
    assert buf.consume_exactly(3) is None  # short: nothing consumed
    assert len(buf) == 2
    buf.rollback()
    assert len(buf) == 5
    assert buf.consume_exactly(2) == b"he"
    buf.commit()
    buf.feed(b" world")
    assert buf.uncommitted == 9
    assert buf.consume_exactly(9) == b"llo world"
    buf.rollback()
    assert buf.peek() == b"llo world"


def test_consume_at_most_and_until():
    buf = Buffer()
    buf.feed(b"ab\r\ncd")
    assert buf.consume_until(b"\r\n") == b"ab"
    assert buf.consume_until(b"\r\n") is None
    assert buf.consume_at_most(10) == b"cd"
    assert buf.consume_at_most(10) == b""
    buf.feed(b"xxxx;")
    assert buf.consume_until(b";", limit=2) is None
    assert buf.consume_until(b";", limit=4) == b"xxxx"


def test_find_and_skip_are_relative_to_the_read_position():
    buf = Buffer()
    buf.feed(b"012345")
    buf.skip(2)
    assert buf.find(b"4") == 2
    assert buf.find(b"0") == -1
    assert buf.find(b"5", 0, 3) == -1
    buf.skip(100)
    assert len(buf) == 0 and not buf


def test_feed_drops_committed_bytes():
    buf = Buffer()
    buf.feed(b"x" * 1000)
    buf.consume_to(990)
    buf.feed(b"yz")
    assert len(buf.data) == 12
    assert buf.pos == 0
    assert buf.peek() == b"x" * 10 + b"yz"


def test_exceeded_counts_uncommitted_bytes():
    buf = Buffer(max_size=10)
    buf.feed(b"a" * 10)
    assert not buf.exceeded
    buf.feed(b"b")
    assert buf.exceeded
    buf.consume_exactly(5)
    buf.commit()
    assert not buf.exceeded
    assert not Buffer().exceeded


def test_clear():
    buf = Buffer()
    buf.feed(b"abc")
    buf.skip(1)
    buf.clear()
    assert len(buf) == 0 and buf.uncommitted == 0


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=20), max_size=20),
    reads=st.lists(st.integers(min_value=0, max_value=30), max_size=30),
)
def test_reads_return_the_stream_in_order(chunks, reads):
    """Whatever the chunking, committed reads concatenate to the fed stream's prefix."""
    buf = Buffer()
    got = bytearray()
    reads_iter = iter(reads)
    for chunk in chunks:
        buf.feed(chunk)
        for n in reads_iter:
            piece = buf.consume_exactly(n)
            if piece is None:
                buf.rollback()
                break
            got += piece
            buf.commit()
    rest = buf.consume_at_most(10**6)
    assert bytes(got + rest) == b"".join(chunks)
