"""RecordBatch view, builder, patching, control batches and malformed input."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import RecordBatchBuilder, build_control_batch
from protocol.record_format import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    LOG_APPEND_TIME,
    CorruptRecordError,
    InvalidRecordError,
    encode_varint,
    read_varint,
)
from protocol.records import (
    ControlRecord,
    RecordBatch,
    iter_batches,
    iter_batches_lenient,
    parse_control_record,
    peek_magic,
)


def build(n=3, codec=0, base_offset=0, **kw):
    b = RecordBatchBuilder(compression_type=codec, base_offset=base_offset, **kw)
    for i in range(n):
        b.append(1000 + i * 10, b"k%d" % i, b"value-%d" % i, [("h", b"x")])
    return b.build()


def test_header_fields_match_the_builder():
    data = build(
        n=4,
        codec=1,
        base_offset=50,
        producer_id=77,
        producer_epoch=2,
        base_sequence=10,
        is_transactional=True,
        partition_leader_epoch=5,
    )
    batch = RecordBatch(data)
    assert BATCH_HEADER_SIZE == 61
    assert batch.base_offset == 50
    assert batch.batch_length == len(data) - 12
    assert batch.size_in_bytes == len(data)
    assert batch.partition_leader_epoch == 5
    assert batch.magic == 2
    assert batch.compression_type == 1
    assert batch.timestamp_type == 0
    assert batch.is_transactional and not batch.is_control
    assert batch.last_offset_delta == 3
    assert (batch.last_offset, batch.next_offset) == (53, 54)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1030)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, 10)
    assert batch.last_sequence == 13
    assert batch.record_count == 4
    assert batch.is_valid()
    assert [r.offset for r in batch] == [50, 51, 52, 53]
    assert [r.timestamp for r in batch] == [1000, 1010, 1020, 1030]
    assert bytes(batch.buffer) == data


def test_timestamps_may_go_backwards_and_be_missing():
    b = RecordBatchBuilder()
    b.append(5000, None, b"a")
    b.append(4000, None, b"b")
    b.append(-1, None, b"c")
    batch = RecordBatch(b.build())
    assert [r.timestamp for r in batch] == [5000, 4000, -1]
    assert batch.max_timestamp == 5000


def test_empty_builder_is_rejected():
    with pytest.raises(ValueError):
        RecordBatchBuilder().build()


def test_patching_needs_a_writable_buffer():
    batch = RecordBatch(build())
    with pytest.raises(TypeError):
        batch.set_base_offset(5)


def test_set_base_offset_and_epoch_keep_crc():
    buf = bytearray(build(n=5, codec=3))
    batch = RecordBatch(buf)
    crc = batch.crc
    batch.set_base_offset(2**40)
    batch.set_partition_leader_epoch(123)
    assert batch.crc == crc and batch.is_valid()
    again = RecordBatch(buf)
    assert again.base_offset == 2**40 and again.partition_leader_epoch == 123
    assert [r.offset for r in again] == [2**40 + i for i in range(5)]


def test_set_max_timestamp_switches_timestamp_type_and_recomputes_crc():
    buf = bytearray(build(n=3))
    batch = RecordBatch(buf)
    batch.set_max_timestamp(9_999, LOG_APPEND_TIME)
    again = RecordBatch(buf)
    again.validate()
    assert again.timestamp_type == LOG_APPEND_TIME and again.max_timestamp == 9_999
    assert [r.timestamp for r in again] == [9_999] * 3
    # and back to CreateTime
    again.set_max_timestamp(1020, 0)
    back = RecordBatch(buf)
    back.validate()
    assert [r.timestamp for r in back] == [1000, 1010, 1020]
    assert bytes(buf) == build(n=3)


def test_batch_inside_a_larger_buffer():
    a, b = build(n=2), build(n=3, base_offset=2, codec=2)
    buf = bytearray(b"\x00" * 7 + a + b)
    batches = list(iter_batches(buf, 7))
    assert [x.base_offset for x in batches] == [0, 2]
    batches[1].set_base_offset(100)
    assert batches[1].is_valid()
    assert RecordBatch(buf, 7 + len(a)).base_offset == 100
    assert RecordBatch(buf, 7).base_offset == 0


def test_iter_batches_raises_on_torn_tail_and_lenient_stops():
    data = build(n=2) + build(n=3, base_offset=2)
    for cut in range(1, len(data) - len(build(n=2))):
        torn = data[:-cut]
        with pytest.raises(CorruptRecordError):
            list(iter_batches(torn))
        assert [x.base_offset for x in iter_batches_lenient(torn)] == [0]
    assert len(list(iter_batches_lenient(data))) == 2
    assert list(iter_batches(b"")) == []


def test_wrong_magic_is_corrupt():
    buf = bytearray(build())
    buf[16] = 1
    with pytest.raises(CorruptRecordError):
        RecordBatch(buf)
    assert peek_magic(buf) == 1
    with pytest.raises(CorruptRecordError):
        peek_magic(b"\x00" * 10)


def test_too_small_batch_length_is_corrupt():
    buf = bytearray(build())
    struct.pack_into(">i", buf, 8, 10)
    with pytest.raises(CorruptRecordError):
        RecordBatch(buf)


def test_corrupt_errors_carry_kafka_codes():
    err = CorruptRecordError("x")
    assert isinstance(err, KafkaError) and err.code == ErrorCode.CORRUPT_MESSAGE
    assert InvalidRecordError("y").code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_every_flipped_covered_byte_is_detected(codec):
    data = build(n=4, codec=codec)
    for pos in range(21, len(data)):
        buf = bytearray(data)
        buf[pos] ^= 0x80
        with pytest.raises(CorruptRecordError):
            RecordBatch(buf).validate()
    # bytes outside the CRC (base offset, length excluded, leader epoch) do not matter
    buf = bytearray(data)
    buf[3] ^= 0xFF
    buf[14] ^= 0xFF
    RecordBatch(buf).validate()


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_truncated_batches_never_raise_index_error(codec):
    data = build(n=4, codec=codec)
    for cut in range(1, len(data)):
        with pytest.raises(CorruptRecordError):
            list(RecordBatch(data[:-cut]))


def _with_records_section(section: bytes, count: int) -> bytes:
    """A batch (codec none) whose records section is ``section``, CRC made valid."""
    b = RecordBatchBuilder()
    b.append(0, None, b"x")
    header = bytearray(b.build()[:BATCH_HEADER_SIZE])
    out = header + section
    fields = list(BATCH_HEADER.unpack_from(out))
    fields[1] = len(out) - 12
    fields[12] = count
    BATCH_HEADER.pack_into(out, 0, *fields)
    batch = RecordBatch(out)
    struct.pack_into(">I", out, 17, batch.compute_crc())
    return bytes(out)


@pytest.mark.parametrize(
    "section,count",
    [
        (b"", 1),  # fewer records than declared
        (b"\x02\x00", 1),  # record length 1 but the body is cut
        (b"\x00", 1),  # zero-length record
        (b"\x7f", 1),  # negative record length
        (b"\xff\xff\xff\xff\xff\xff", 1),  # varint too long
        (b"\x0e\x00\x00\x00\x00\x01\x00\x00\x00", 2),  # a record then garbage
        (b"\x0c\x00\x00\x00\x03\x01\x00", 1),  # invalid key length -2
        (b"\x0c\x00\x00\x00\x40\x01\x00", 1),  # key longer than the record
        (b"\x0c\x00\x00\x00\x01\x01\x01", 1),  # negative header count
        (b"\x10\x00\x00\x00\x01\x01\x02\x02\xff", 1),  # header key not UTF-8
        (b"\x0e\x00\x00\x00\x01\x01\x02\x01\x00", 1),  # null header key
        (b"\x10\x00\x00\x00\x01\x01\x00\x00\x00", 1),  # unread bytes inside the record
    ],
)
def test_malformed_records_are_corrupt(section, count):
    batch = RecordBatch(_with_records_section(section, count))
    batch.validate()
    with pytest.raises(CorruptRecordError):
        list(batch)


def test_negative_record_count_fails_validate():
    batch = RecordBatch(_with_records_section(b"", -1))
    with pytest.raises(CorruptRecordError):
        batch.validate()
    with pytest.raises(CorruptRecordError):
        list(batch)


def test_decompression_bound_applies_to_batches():
    b = RecordBatchBuilder(compression_type=1)
    b.append(0, None, b"\x00" * 100_000)
    batch = RecordBatch(b.build())
    assert batch.size_in_bytes < 1000
    with pytest.raises(CorruptRecordError):
        list(batch.iter_records(max_decompressed_size=50_000))
    assert len(next(iter(batch.iter_records(max_decompressed_size=200_000))).value) == 100_000


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=300), st.integers(0, 3))
def test_random_payloads_only_raise_typed_errors(payload, codec):
    data = bytearray(_with_records_section(payload, 3))
    fields = list(BATCH_HEADER.unpack_from(data))
    fields[5] = codec
    BATCH_HEADER.pack_into(data, 0, *fields)
    try:
        list(RecordBatch(data))
    except KafkaError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-1, 2**41),
            st.one_of(st.none(), st.binary(max_size=50)),
            st.one_of(st.none(), st.binary(max_size=300)),
            st.lists(
                st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
                max_size=3,
            ),
        ),
        min_size=1,
        max_size=20,
    ),
    st.integers(0, 4),
)
def test_builder_round_trip(records, codec):
    b = RecordBatchBuilder(compression_type=codec, base_offset=10)
    for ts, k, v, h in records:
        b.append(ts, k, v, h)
    batch = RecordBatch(b.build())
    batch.validate()
    got = [(r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [(ts, k, v, list(h)) for ts, k, v, h in records]
    assert [r.offset for r in batch] == list(range(10, 10 + len(records)))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(value):
    out = bytearray()
    encode_varint(value, out)
    assert read_varint(out, 0) == (value, len(out))


def test_varint_known_encodings():
    for value, encoded in [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-65, b"\x81\x01"),
    ]:
        out = bytearray()
        encode_varint(value, out)
        assert bytes(out) == encoded
    with pytest.raises(CorruptRecordError):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0, 5)
    with pytest.raises(CorruptRecordError):
        read_varint(b"\x80", 0)


@pytest.mark.parametrize("marker,ctype", [("commit", CONTROL_COMMIT), ("abort", CONTROL_ABORT)])
def test_control_batches(marker, ctype):
    data = build_control_batch(marker, 1234, 5, 17, 1_700_000_000_000, base_offset=99)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, -1)
    assert batch.base_offset == 99 and batch.record_count == 1
    assert batch.control_record() == ControlRecord(0, ctype, 17)
    assert batch.control_record().is_commit == (marker == "commit")
    (rec,) = list(batch)
    assert rec.key == struct.pack(">hh", 0, ctype)
    assert rec.value == struct.pack(">hi", 0, 17)


def test_control_record_errors():
    with pytest.raises(InvalidRecordError):
        RecordBatch(build()).control_record()
    with pytest.raises(InvalidRecordError):
        parse_control_record(b"\x00", b"\x00\x00\x00\x00\x00\x00")
    with pytest.raises(InvalidRecordError):
        parse_control_record(struct.pack(">hh", 0, 7), struct.pack(">hi", 0, 1))
    with pytest.raises(InvalidRecordError):
        parse_control_record(struct.pack(">hh", 0, 1), None)
    with pytest.raises(ValueError):
        build_control_batch("maybe", 1, 1, 1, 1)


def test_control_batch_without_records():
    data = bytearray(_with_records_section(b"", 0))
    fields = list(BATCH_HEADER.unpack_from(data))
    fields[5] = 0x30
    BATCH_HEADER.pack_into(data, 0, *fields)
    with pytest.raises(InvalidRecordError):
        RecordBatch(data).control_record()
