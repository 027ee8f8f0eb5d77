"""File formats the stream ships: page files carry a format version (files written before it,
without a header, are version 1 and still read; an unknown version is refused at recovery),
and the `Store` protocol is complete: NullStore and FileStore have every member."""

from __future__ import annotations

import struct
import threading
import zlib

import msgspec
import pytest

from petrel.core.message import Message, encode_message
from petrel.storage.file_store import FileStore
from petrel.storage.paging import HEADER, PAGE_FORMAT_VERSION, PageFormatError, PagePosition, PageStore
from petrel.storage.store import NullStore, Store


def message(i: int) -> Message:
    return Message(id=i, address="q", body=b"body %d" % i, durable=True)


def flush(pages: PageStore) -> None:
    done = threading.Event()
    pages.sync(done.set)
    assert done.wait(10)


def version_1_record(seq: int, m: Message) -> bytes:
    payload = msgspec.msgpack.encode((seq, m.durable, m.id, encode_message(m)))
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


def test_a_new_page_file_starts_with_its_format_version(tmp_path):
    pages = PageStore(tmp_path, datasync=False)
    pages.recover()
    pages.start()
    end = pages.append(4, 1, message(1))
    flush(pages)
    data = (tmp_path / "4" / f"{end.file:09d}.page").read_bytes()
    assert data.startswith(HEADER) and struct.unpack_from("<I", data, 8)[0] == PAGE_FORMAT_VERSION
    assert end.offset == len(data)
    assert [p.seq for p in pages.read(4, PagePosition(0, 0), 1 << 20)] == [1]
    assert pages.count_after(4, PagePosition(0, 0)) == 1
    pages.stop()


def test_page_files_without_a_header_are_version_1_and_still_read(tmp_path):
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "000000001.page").write_bytes(
        version_1_record(1, message(1)) + version_1_record(2, message(2)))
    pages = PageStore(tmp_path, datasync=False)
    assert pages.recover() == {6: [1]}
    pages.start()
    assert [p.seq for p in pages.read(6, PagePosition(0, 0), 1 << 20)] == [1, 2]
    assert pages.count_after(6, PagePosition(1, 0)) == 2
    pages.append(6, 3, message(3))  # a new file, with a header, after the old one
    flush(pages)
    assert [p.seq for p in pages.read(6, PagePosition(0, 0), 1 << 20)] == [1, 2, 3]
    pages.stop()


def test_a_page_file_of_an_unknown_version_is_refused_at_recovery(tmp_path):
    (tmp_path / "paging" / "3").mkdir(parents=True)
    path = tmp_path / "paging" / "3" / "000000002.page"
    path.write_bytes(struct.pack("<I4sI", 0, b"PTPG", 99) + b"whatever")
    store = FileStore(tmp_path, datasync=False)
    with pytest.raises(PageFormatError, match=r"000000002\.page has format version 99"):
        store.recover()
    store.close()


def test_every_store_has_every_member_of_the_protocol(tmp_path):
    members = [n for n in dir(Store) if not n.startswith("_")] + list(Store.__annotations__)
    null = NullStore()
    store = FileStore(tmp_path, datasync=False)
    try:
        for name in members:
            assert hasattr(null, name), f"NullStore lacks {name}"
            assert hasattr(store, name), f"FileStore lacks {name}"
        assert null.stream is None and store.stream is not None
        assert null.persist_error() is None and null.pending_bytes() == 0
        assert not null.pages_in_flight(1) and null.count_pages(1, PagePosition(0, 0)) == 0
        with pytest.raises(NotImplementedError):
            null.page(1, 1, message(1))
        ran = []
        null.after_written(lambda: ran.append(1))
        null.release_pages(1)
        null.delete_pages(1, 0)
        assert ran == [1]
    finally:
        store.close()


def test_a_small_file_replaced_through_the_stream_is_replaced_in_the_copy_too(tmp_path):
    from petrel.storage.replica import ReplicaDirectory
    from petrel.storage.stream import StoreStream

    live = tmp_path / "live"
    live.mkdir()
    stream = StoreStream(live)
    stream.replace_file(live / "cluster-bindings.json", b'{"bindings": []}')
    replica = ReplicaDirectory(tmp_path / "copy", sync=False)
    copier = stream.start_sync(replica.apply, chunk_size=4)
    copier.step()
    stream.replace_file(live / "cluster-bindings.json", b'{"bindings": [{"queue": "q"}]}')
    copier.run()
    stream.replace_file(live / "cluster-bindings.json", b'{"bindings": [1, 2]}')
    replica.close()
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["cluster-bindings.json"]
    assert (tmp_path / "copy" / "cluster-bindings.json").read_bytes() == b'{"bindings": [1, 2]}'


def test_a_journal_segment_or_control_file_of_an_unknown_version_is_refused(tmp_path):
    """A segment header has no checksum (a flipped version bit looks like another version), so
    an unknown segment version is damage (refused unless skipping it); a control file has one,
    so an unknown control-file version is refused whatever `skip_damaged` says."""
    import zlib as _zlib

    from petrel.storage.journal import DamagedJournal, FileJournal
    from petrel.storage.journal.errors import UnsupportedFormat
    from petrel.storage.journal.records import MAGIC

    journal = FileJournal(tmp_path / "j", file_size=16 * 1024, datasync=False)
    journal.load()
    journal.start(lambda callbacks: [cb() for cb in callbacks])
    journal.add(1, 1, b"x")
    journal.stop()
    segment = sorted((tmp_path / "j").glob("petrel-data-[0-9]*.pj"))[0]
    data = bytearray(segment.read_bytes())
    assert data[:4] == MAGIC
    data[4:6] = (7).to_bytes(2, "little")
    segment.write_bytes(bytes(data))
    with pytest.raises(DamagedJournal, match="unsupported format version 7"):
        FileJournal(tmp_path / "j", file_size=16 * 1024, datasync=False).load()
    data[4:6] = (1).to_bytes(2, "little")
    segment.write_bytes(bytes(data))  # version 1 again: only the control file is wrong now

    text = "petrel-journal-rename-control 2\nrename a b\n"
    (tmp_path / "j" / "journal-rename-control.ctr").write_bytes(
        text.encode() + f"end {_zlib.crc32(text.encode()):08x}\n".encode())
    for skip in (False, True):
        with pytest.raises(UnsupportedFormat, match="format '2'"):
            FileJournal(tmp_path / "j", file_size=16 * 1024, datasync=False).load(skip_damaged=skip)


def test_large_messages_outside_the_streamed_directory_are_refused_at_once(tmp_path):
    from petrel.storage.large import LargeMessageStore
    from petrel.storage.stream import StoreStream

    with pytest.raises(ValueError, match="outside the data directory"):
        LargeMessageStore(tmp_path / "elsewhere", stream=StoreStream(tmp_path / "data"))
