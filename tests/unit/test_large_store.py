"""LargeMessageStore: writing, linking, reading, deleting, and cleaning up after a crash."""

from __future__ import annotations

import os

import pytest

from petrel.core.message import LargeBody, Message, decode_message, encode_message
from petrel.storage.large import LargeBodyMissing, LargeMessageStore, reconcile
from petrel.storage.store import NullStore, Recovered, RecoveredRef


def chunks(total: int, size: int = 7919):
    """Deterministic, non-repeating-looking bytes in pieces of `size`."""
    produced = 0
    n = 0
    while produced < total:
        piece = bytes((n * 31 + i * 7) % 251 for i in range(min(size, total - produced)))
        produced += len(piece)
        n += 1
        yield piece


def test_write_names_the_file_after_the_message(tmp_path):
    store = LargeMessageStore(tmp_path / "lm")
    body = store.write(42, chunks(100_000))
    assert body == LargeBody("42.msg", 100_000)
    assert store.names() == ["42.msg"]
    assert store.read(body) == b"".join(chunks(100_000))


def test_writer_keeps_a_tmp_name_until_finished(tmp_path):
    store = LargeMessageStore(tmp_path)
    writer = store.create(7)
    writer.write(b"abc")
    writer.write(memoryview(b"defg"))
    assert store.names() == ["7.msg.tmp"]
    body = writer.finish(durable=False)
    assert store.names() == ["7.msg"]
    assert body.size == 7
    assert store.read(body) == b"abcdefg"


def test_abort_removes_the_tmp_file(tmp_path):
    store = LargeMessageStore(tmp_path)
    writer = store.create(3)
    writer.write(b"x" * 1000)
    writer.abort()
    assert store.names() == []


def test_write_failure_leaves_nothing(tmp_path):
    store = LargeMessageStore(tmp_path)

    def broken():
        yield b"x" * 10
        raise RuntimeError("client went away")

    with pytest.raises(RuntimeError):
        store.write(5, broken())
    assert store.names() == []


def test_reader_streams_in_chunks_and_stops_at_the_size(tmp_path):
    store = LargeMessageStore(tmp_path)
    data = b"".join(chunks(300_000))
    body = store.write(1, [data])
    with store.open(body) as reader:
        parts = []
        while piece := reader.read(65536):
            assert len(piece) <= 65536
            parts.append(piece)
    assert b"".join(parts) == data
    assert len(parts) == 5


def test_reader_keeps_reading_after_the_name_is_deleted(tmp_path):
    store = LargeMessageStore(tmp_path)
    body = store.write(1, [b"y" * 50_000])
    reader = store.open(body)
    store.delete(body)
    assert store.names() == []
    assert reader.read(100_000) == b"y" * 50_000
    reader.close()


def test_reader_refuses_a_short_file(tmp_path):
    store = LargeMessageStore(tmp_path)
    body = store.write(1, [b"z" * 1000])
    with open(store.path(body), "r+b") as f:
        f.truncate(10)
    reader = store.open(body)
    with pytest.raises(LargeBodyMissing):
        reader.read(1000)
    reader.close()


def test_open_missing_file_raises(tmp_path):
    store = LargeMessageStore(tmp_path)
    with pytest.raises(LargeBodyMissing):
        store.open(LargeBody("9.msg", 5))


def test_link_gives_a_copy_its_own_name_sharing_data(tmp_path):
    store = LargeMessageStore(tmp_path)
    body = store.write(10, [b"data" * 1000])
    copy = store.link(body, 11)
    assert copy == LargeBody("11.msg", 4000)
    assert os.stat(store.path(body)).st_ino == os.stat(store.path(copy)).st_ino
    store.delete(body)
    assert store.names() == ["11.msg"]
    assert store.read(copy) == b"data" * 1000


def test_link_of_a_missing_file_raises(tmp_path):
    store = LargeMessageStore(tmp_path)
    with pytest.raises(LargeBodyMissing):
        store.link(LargeBody("1.msg", 3), 2)


def test_delete_twice_is_harmless(tmp_path):
    store = LargeMessageStore(tmp_path)
    body = store.write(1, [b"a"])
    store.delete(body)
    store.delete(body)
    assert store.names() == []


def test_remove_orphans_keeps_live_and_foreign_files(tmp_path, caplog):
    store = LargeMessageStore(tmp_path)
    store.write(1, [b"live"])
    store.write(2, [b"orphan"])
    store.create(3).write(b"half")  # a crash in the middle of receiving
    (tmp_path / "README").write_text("not ours")
    with caplog.at_level("INFO", logger="petrel.storage.large"):
        removed = store.remove_orphans({"1.msg"})
    assert removed == 2
    assert store.names() == ["1.msg", "README"]
    text = caplog.text
    assert "2.msg" in text and "3.msg.tmp" in text


def test_message_encoding_round_trips_the_large_body():
    m = Message(id=5, address="a", body=b"", properties={"k": "v"}, durable=True, large=LargeBody("5.msg", 123))
    back = decode_message(5, encode_message(m))
    assert back.large == LargeBody("5.msg", 123)
    assert back.body == b"" and back.body_size == 123
    plain = Message(id=6, address="a", body=b"xyz")
    assert decode_message(6, encode_message(plain)).large is None
    assert plain.body_size == 3
    # a plain message's record is what it was before large messages existed
    assert len(encode_message(plain)) < len(encode_message(Message(id=6, address="a", body=b"xyz",
                                                                    large=LargeBody("6.msg", 3))))


class RecordingStore(NullStore):
    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[int] = []

    def delete_message(self, tx_id, message_id):
        self.deleted.append(message_id)


def test_reconcile_drops_messages_without_files_and_files_without_messages(tmp_path, caplog):
    large = LargeMessageStore(tmp_path)
    kept = large.write(1, [b"k" * 10])
    large.write(2, [b"o" * 10])  # its journal record never became durable
    large.create(4).write(b"t")  # a body still arriving when the broker died
    keep = Message(id=1, address="q", body=b"", durable=True, large=kept)
    lost = Message(id=3, address="q", body=b"", durable=True, large=LargeBody("3.msg", 10))
    small = Message(id=5, address="q", body=b"s", durable=True)
    rec = Recovered(messages=[(keep, [RecoveredRef(1, 1)]), (lost, [RecoveredRef(1, 2)]), (small, [])])
    store = RecordingStore()
    with caplog.at_level("INFO", logger="petrel.storage.large"):
        removed = reconcile(large, rec, store)
    assert removed == 2
    assert large.names() == ["1.msg"]
    assert [m.id for m, _ in rec.messages] == [1, 5]
    assert store.deleted == [3]
    assert "3.msg is missing" in caplog.text


def test_reconcile_keeps_extra_live_names(tmp_path):
    large = LargeMessageStore(tmp_path)
    large.write(8, [b"p"])
    assert reconcile(large, Recovered(), NullStore(), extra_live=["8.msg"]) == 0
    assert large.names() == ["8.msg"]
    assert reconcile(large, Recovered(), NullStore()) == 1
    assert large.names() == []
