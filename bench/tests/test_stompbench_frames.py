"""The generator's frame templates and chunk scanner."""

from __future__ import annotations

from array import array

import pytest

from stompbench.frames import (
    BrokerError,
    Scan,
    ack_id,
    body_of,
    read_frame_command,
    render,
    scan,
    send_template,
)


def message(n: int, ts: int, ack: bytes | None = None) -> bytes:
    head = b"MESSAGE\nsubscription:0\nmessage-id:ID\\cm\\c%d\n" % n
    if ack is not None:
        head += b"ack:" + ack + b"\n"
    return head + b"bench-ts:%d\ncontent-length:5\n\nhello\0" % ts


def feed(chunks: list[bytes], now: int) -> tuple[int, int, list[int], array, bytes]:
    """Scan chunk by chunk as a consumer does; return totals and the leftover."""
    buf, messages, receipts, ids, lat = b"", 0, 0, [], array("q")
    out = Scan()
    for chunk in chunks:
        buf += chunk
        scan(buf, now, lat, ids, out)
        messages += out.messages
        receipts += out.receipts
        buf = buf[out.consumed :]
    return messages, receipts, ids, lat, buf


def test_body_has_exact_size_and_no_nul() -> None:
    for size in (1, 50, 1024, 4097):
        body = body_of(size)
        assert len(body) == size
        assert b"\0" not in body


def test_send_template_fills_receipt_and_timestamp() -> None:
    t = send_template("/queue/a", b"100%", [("persistent", "true")], receipt=True)
    frame = t % (7, 123)
    assert frame.startswith(b"SEND\ndestination:/queue/a\n")
    assert b"\npersistent:true\n" in frame
    assert b"\nreceipt:7\n" in frame
    assert b"\nbench-ts:123\n\n100%\0" in frame
    assert b"content-length:4\n" in frame


def test_send_template_without_receipt_has_one_hole() -> None:
    frame = send_template("/topic/t", b"x", [], receipt=False) % 99
    assert b"receipt" not in frame
    assert frame.endswith(b"bench-ts:99\n\nx\0")


def test_scan_counts_messages_receipts_and_latency() -> None:
    data = message(1, 100) + b"\n" + b"RECEIPT\nreceipt-id:42\n\n\0" + message(2, 250) + b"\n"
    n, r, ids, lat, rest = feed([data], now=1000)
    assert (n, r, ids, list(lat), rest) == (2, 1, [42], [900, 750], b"")


@pytest.mark.parametrize("step", [1, 2, 7, 64])
def test_scan_is_independent_of_chunking(step: int) -> None:
    data = b"".join(message(i, i) + b"\n" for i in range(20)) + b"RECEIPT\nreceipt-id:5\n\n\0"
    whole = feed([data], now=10_000)
    pieces = feed([data[i : i + step] for i in range(0, len(data), step)], now=10_000)
    assert whole[:4] == pieces[:4]
    assert whole[0] == 20 and whole[1] == 1


def test_scan_keeps_an_unfinished_frame() -> None:
    data = message(1, 1) + message(2, 2)
    n, _, _, _, rest = feed([data[:-3]], now=5)
    assert n == 1
    assert rest == message(2, 2)[:-3]


def test_scan_raises_on_error_frame() -> None:
    with pytest.raises(BrokerError, match="queue full"):
        scan(b"ERROR\nmessage:queue full\n\nqueue full\0", 0, None, None, Scan())


def test_ack_id_prefers_ack_header_and_keeps_escapes() -> None:
    frame = message(3, 1, ack=b"T_1@@s@@3")
    out = scan(frame, 0, None, None, Scan())
    assert ack_id(frame, out.last_message, out.last_header_end) == b"T_1@@s@@3"
    plain = message(4, 1)
    out = scan(plain, 0, None, None, Scan())
    assert ack_id(plain, out.last_message, out.last_header_end) == b"ID\\cm\\c4"


def test_render_escapes_and_read_frame_command() -> None:
    frame = render("SUBSCRIBE", [("id", "a:b"), ("destination", "/queue/x")])
    assert b"id:a\\cb\n" in frame
    assert read_frame_command(b"\n" + frame + b"tail") == ("SUBSCRIBE", frame[:-1], len(frame) + 1)
    assert read_frame_command(frame[:-1]) is None
