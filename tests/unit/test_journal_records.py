"""Record encoding: round trips, and every kind of damage is told apart."""

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.storage.journal.records import (
    HEADER_SIZE,
    CorruptRecord,
    Record,
    RecordError,
    RecordType,
    TornRecord,
    decode,
    decode_segment_header,
    decode_tx_counts,
    encode,
    encode_segment_header,
    encode_tx_counts,
    record_size,
)

SAMPLES = [
    Record(RecordType.ADD, id=7, user_type=3, body=b"hello"),
    Record(RecordType.UPDATE, id=2**64 - 1, user_type=255, body=b"\x00" * 40),
    Record(RecordType.DELETE, id=99),
    Record(RecordType.ADD_TX, id=5, user_type=1, body=b"abc", tx_id=12),
    Record(RecordType.UPDATE_TX, id=5, user_type=2, body=b"", tx_id=2**63),
    Record(RecordType.DELETE_TX, id=5, tx_id=12),
    Record(RecordType.PREPARE, tx_id=12, count=3, body=b"xid"),
    Record(RecordType.COMMIT, tx_id=12, count=3, body=encode_tx_counts({1: 2, 4: 1})),
    Record(RecordType.ROLLBACK, tx_id=12),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: r.type.name)
def test_round_trip_every_type(record):
    data = encode(record, 42)
    assert len(data) == record_size(record.type, len(record.body))
    back, end = decode(data, 0, 42)
    assert back == record
    assert end == len(data)
    assert isinstance(back.type, RecordType)


def test_decode_at_an_offset_and_back_to_back():
    blob = b"\xff" * 10 + b"".join(encode(r, 3) for r in SAMPLES)
    off = 10
    for record in SAMPLES:
        back, off = decode(blob, off, 3)
        assert back == record
    assert off == len(blob)


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: r.type.name)
def test_every_single_bit_flip_is_corrupt(record):
    data = encode(record, 5)
    for bit in range(len(data) * 8):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptRecord):
            decode(bytes(damaged), 0, 5)


def test_zeros_read_as_torn():
    with pytest.raises(TornRecord) as info:
        decode(bytes(4096), 100, 1)
    assert not info.value.ours


def test_short_buffer_reads_as_torn():
    with pytest.raises(TornRecord):
        decode(b"\x0b\x00\x10", 0, 1)


def test_stale_record_of_an_older_segment_reads_as_torn():
    data = encode(SAMPLES[0], 4)  # 4 and 5 differ in one bit: the header check still tells them apart
    with pytest.raises(TornRecord) as info:
        decode(data, 0, 5)
    assert not info.value.ours
    with pytest.raises(TornRecord):
        decode(encode(SAMPLES[0], 1000), 0, 5)


def test_truncated_record_is_torn_and_ours():
    data = encode(Record(RecordType.ADD, id=1, body=b"x" * 100), 9)
    for cut in (20, 40, len(data) - 1):
        with pytest.raises(TornRecord) as info:
            decode(data[:cut], 0, 9)
        assert info.value.ours


def test_torn_write_with_zero_filled_body_is_corrupt():
    data = bytearray(encode(Record(RecordType.ADD, id=1, body=b"x" * 100), 9))
    data[40:] = bytes(len(data) - 40)  # the header made it to disk, the rest did not
    with pytest.raises(CorruptRecord):
        decode(bytes(data), 0, 9)


def test_unknown_type_with_sound_header_is_corrupt():
    head = struct.pack("<BBIQ", 42, 0, 40, 1)
    data = head + struct.pack("<H", zlib.crc32(head) & 0xFFFF) + bytes(24)
    with pytest.raises(CorruptRecord):
        decode(data, 0, 1)


def test_encode_rejects_bad_user_type():
    with pytest.raises(ValueError):
        encode(Record(RecordType.ADD, id=1, user_type=256), 1)


def test_segment_header_round_trip_and_rejects():
    header = encode_segment_header(2**40 + 3)
    assert len(header) == HEADER_SIZE
    assert header[:4] == b"PTRJ"
    assert decode_segment_header(header) == 2**40 + 3
    with pytest.raises(ValueError):
        decode_segment_header(b"XXXX" + header[4:])
    with pytest.raises(ValueError):
        decode_segment_header(bytes(16))
    with pytest.raises(ValueError):
        decode_segment_header(header[:4] + struct.pack("<H", 2) + header[6:])


def test_tx_counts_round_trip():
    counts = {1: 3, 2**64 - 1: 1}
    assert decode_tx_counts(encode_tx_counts(counts)) == counts
    with pytest.raises(ValueError):
        decode_tx_counts(b"\x01\x02")


records = st.builds(
    Record,
    type=st.sampled_from(list(RecordType)),
    id=st.integers(0, 2**64 - 1),
    user_type=st.integers(0, 255),
    body=st.binary(max_size=200),
    tx_id=st.integers(0, 2**64 - 1),
    count=st.integers(0, 2**32 - 1),
)


def _normal(r: Record) -> Record:
    """What decode can give back: fields a type does not carry read as zero."""
    if r.type in (RecordType.ADD, RecordType.UPDATE, RecordType.DELETE, RecordType.MARK):
        return Record(r.type, r.id, r.user_type, r.body)
    if r.type in (RecordType.ADD_TX, RecordType.UPDATE_TX, RecordType.DELETE_TX):
        return Record(r.type, r.id, r.user_type, r.body, r.tx_id)
    if r.type in (RecordType.PREPARE, RecordType.COMMIT):
        return Record(r.type, 0, 0, r.body, r.tx_id, r.count)
    return Record(r.type, 0, 0, r.body, r.tx_id)


@settings(max_examples=300, deadline=None)
@given(record=records, segment=st.integers(1, 2**64 - 1))
def test_round_trip_property(record, segment):
    back, end = decode(encode(record, segment), 0, segment)
    assert back == _normal(record)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), offset=st.integers(0, 50), segment=st.integers(1, 2**64 - 1))
def test_any_bytes_give_a_record_or_a_record_error(data, offset, segment):
    try:
        record, end = decode(data, offset, segment)
    except RecordError:
        return
    assert offset < end <= len(data)
    assert encode(record, segment) == bytes(data[offset:end])
