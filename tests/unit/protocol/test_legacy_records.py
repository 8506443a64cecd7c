"""Legacy v0/v1 message sets: kcat frames, kafka-python cross-checks, up/down conversion."""

import struct
import warnings
import zlib
from pathlib import Path

import pytest

from protocol.errors import ErrorCode, KafkaError
from protocol.legacy_records import (
    LegacyMessage,
    build_message_set,
    convert_from_v2,
    convert_to_v2,
    encode_message,
    iter_legacy_entries,
    iter_legacy_messages,
)
from protocol.record_builder import RecordBatchBuilder, build_control_batch
from protocol.record_format import LOG_APPEND_TIME, CorruptRecordError
from protocol.records import RecordBatch, iter_batches

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

KCAT = next((p for p in (Path(__file__).resolve().parents[3].parent / "shared" / "kafka-protocol"
             / "captured" / "kcat", Path("/work/shared/kafka-protocol/captured/kcat"))
             if p.is_dir()), Path("/work/shared/kafka-protocol/captured/kcat"))


def produce_v0_message_sets(frame: bytes) -> list[bytes]:
    """Message sets of a Produce v0/v1 request frame (header v1, no transactional id)."""
    pos = 4
    _api, version, _corr, client_len = struct.unpack_from(">hhih", frame, pos)
    assert version in (0, 1, 2)
    pos += 10 + max(client_len, 0)
    _acks, _timeout, n_topics = struct.unpack_from(">hii", frame, pos)
    pos += 10
    out = []
    for _ in range(n_topics):
        (n,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + n
        (n_parts,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(n_parts):
            _partition, size = struct.unpack_from(">ii", frame, pos)
            pos += 8
            out.append(frame[pos : pos + size])
            pos += size
    return out


KCAT_FRAMES = sorted(KCAT.glob("*-Produce-*.bin")) if KCAT.exists() else []
KCAT_SETS = [(f.name, ms) for f in KCAT_FRAMES for ms in produce_v0_message_sets(f.read_bytes())]
KCAT_IDS = [name for name, _ in KCAT_SETS]


def test_kcat_frames_present_with_every_legacy_codec():
    if not KCAT_SETS:
        pytest.skip("captured frames not present")
    codecs = {e.compression_type for _, ms in KCAT_SETS for e in iter_legacy_entries(ms)}
    assert codecs == {0, 1, 2, 3}


@pytest.mark.parametrize("name,message_set", KCAT_SETS, ids=KCAT_IDS)
def test_kcat_message_sets_decode(name, message_set):
    entries = list(iter_legacy_entries(message_set))
    messages = list(iter_legacy_messages(message_set))
    assert all(e.magic == 0 for e in entries)
    assert messages and all(m.compression_type == 0 and m.timestamp == -1 for m in messages)
    if "Produce-v1" in name and entries[0].compression_type:
        # the codec scenarios: 5 messages key-i / value-i-...
        assert [m.key for m in messages] == [b"key-%d" % i for i in range(5)]
        assert all(m.value.startswith(b"value-%d-" % i) for i, m in enumerate(messages))


@pytest.mark.parametrize("name,message_set", KCAT_SETS, ids=KCAT_IDS)
def test_kcat_message_sets_reencode_identically(name, message_set):
    entries = list(iter_legacy_entries(message_set))
    # top-level entries (wrappers with their compressed value as sent) re-encode byte-exact
    reencoded = b"".join(
        encode_message(e.magic, e.offset, e.timestamp, e.key, e.value, e.attributes)
        for e in entries
    )
    assert reencoded == message_set
    messages = list(iter_legacy_messages(message_set))
    codec = entries[0].compression_type
    rebuilt = build_message_set(0, messages, codec)
    if codec == 0:
        assert rebuilt == message_set
    else:
        # other compressor settings, same content
        assert list(iter_legacy_messages(rebuilt)) == messages


def test_kcat_null_value_and_big_value():
    if not KCAT_SETS:
        pytest.skip("captured frames not present")
    sets = dict(KCAT_SETS)
    null_msgs = list(iter_legacy_messages(sets["0009-Produce-v1.bin"]))
    assert (null_msgs[0].key, null_msgs[0].value) == (b"key-null", None)
    (big,) = iter_legacy_messages(sets["0010-Produce-v1.bin"])
    assert len(big.value) > 900_000


@pytest.mark.parametrize("name,message_set", KCAT_SETS, ids=KCAT_IDS)
def test_kcat_up_and_down_conversion(name, message_set):
    messages = list(iter_legacy_messages(message_set))
    codec = next(iter_legacy_entries(message_set)).compression_type
    v2 = convert_to_v2(message_set)
    (batch,) = iter_batches(v2)
    batch.validate()
    assert batch.compression_type == codec and batch.producer_id == -1
    records = list(batch)
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        (m.key, m.value, -1) for m in messages
    ]
    back = convert_from_v2(v2, 0)
    assert list(iter_legacy_messages(back)) == messages
    if codec == 0:
        assert back == message_set


# --- kafka-python cross-checks -------------------------------------------------------------

SAMPLE = [
    (i, 1_600_000_000_000 + i, None if i == 2 else b"k%d" % i, None if i == 3 else b"v" * i * 50)
    for i in range(8)
]


def _kp_messages(data: bytes):
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_kafka_python_message_sets_decode(magic, codec):
    if magic == 0 and codec == 3:
        pytest.importorskip("xxhash")  # kafka-python needs it for magic-0 lz4
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for off, ts, k, v in SAMPLE:
        b.append(off, timestamp=ts, key=k, value=v)
    data = bytes(b.build())
    got = [(m.offset, m.timestamp, m.key, m.value) for m in iter_legacy_messages(data)]
    expected_ts = [ts if magic else -1 for _, ts, _, _ in SAMPLE]
    if magic == 1 and codec:
        # kafka-python gives the wrapper offset 0, so absolute inner offsets are -7..0 (the
        # broker assigns real offsets on produce); they stay consecutive.
        assert [o for o, _, _, _ in got] == list(range(-7, 1))
        got = [(o + 7, t, k, v) for o, t, k, v in got]
    assert got == [(o, t, k, v) for (o, _, k, v), t in zip(SAMPLE, expected_ts, strict=True)]
    assert all(m.magic == magic for m in iter_legacy_messages(data))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_our_message_sets_decode_with_kafka_python(magic, codec):
    if magic == 0 and codec == 3:
        pytest.importorskip("xxhash")  # kafka-python needs it for magic-0 lz4
    data = build_message_set(magic, SAMPLE, codec)
    got = _kp_messages(data)
    assert [(o, k, v) for o, _, k, v in got] == [(o, k, v) for o, _, k, v in SAMPLE]
    if magic == 1:
        assert [t for _, t, _, _ in got] == [ts for _, ts, _, _ in SAMPLE]
    assert [(m.offset, m.key, m.value) for m in iter_legacy_messages(data)] == [
        (o, k, v) for o, _, k, v in SAMPLE
    ]


def test_v1_inner_offsets_are_relative_and_wrapper_holds_the_last():
    msgs = [(100 + i, 5, b"k", b"v%d" % i) for i in range(3)]
    data = build_message_set(1, msgs, 1)
    (wrapper,) = iter_legacy_entries(data)
    assert wrapper.offset == 102 and wrapper.compression_type == 1
    inner = list(iter_legacy_entries(zlib.decompress(wrapper.value, 47)))
    assert [m.offset for m in inner] == [0, 1, 2]
    assert [m.offset for m in iter_legacy_messages(data)] == [100, 101, 102]
    data0 = build_message_set(0, msgs, 1)
    (wrapper0,) = iter_legacy_entries(data0)
    inner0 = list(iter_legacy_entries(zlib.decompress(wrapper0.value, 47)))
    assert [m.offset for m in inner0] == [100, 101, 102]


def test_v1_log_append_time_wrapper_timestamp_applies_to_inner():
    inner = build_message_set(1, [(0, 5, None, b"a"), (1, 6, None, b"b")])
    wrapper = encode_message(1, 9, 777, None, zlib.compress(inner), 1 | 0x08)
    msgs = list(iter_legacy_messages(wrapper))
    assert [(m.offset, m.timestamp) for m in msgs] == [(8, 777), (9, 777)]


def test_lz4_magic0_uses_kafkas_old_header_checksum():
    data0 = build_message_set(0, SAMPLE, 3)
    data1 = build_message_set(1, SAMPLE, 3)
    (w0,) = iter_legacy_entries(data0)
    (w1,) = iter_legacy_entries(data1)
    # same frame descriptor (FLG, BD); only the header checksum byte differs
    assert w0.value[4:6] == w1.value[4:6]
    assert w0.value[6] != w1.value[6]
    # golden: kcat (librdkafka, magic 0) sent FLG 0x60, BD 0x40 with checksum byte 0x1a
    assert w0.value[4:7] == bytes.fromhex("60401a")
    if KCAT_SETS:
        kcat_lz4 = dict(KCAT_SETS)["0007-Produce-v1.bin"]
        (wrapper,) = iter_legacy_entries(kcat_lz4)
        assert wrapper.value[4:7] == bytes.fromhex("60401a")


# --- conversion ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 1, 2, 3])
@pytest.mark.parametrize("magic", [0, 1])
def test_down_then_up_conversion_round_trip(codec, magic):
    b = RecordBatchBuilder(compression_type=codec, base_offset=40)
    for _, ts, k, v in SAMPLE:
        b.append(ts, k, v, [("dropped", b"x")])
    first = b.build()
    b2 = RecordBatchBuilder(compression_type=codec, base_offset=48)
    b2.append(1_700_000_000_000, b"late", b"value")
    v2 = first + build_control_batch("commit", 3, 0, 1, 1) + b2.build()
    legacy = convert_from_v2(v2, magic)
    msgs = list(iter_legacy_messages(legacy))
    assert [m.offset for m in msgs] == list(range(40, 49))  # control batch dropped
    assert [m.key for m in msgs] == [k for _, _, k, _ in SAMPLE] + [b"late"]
    if magic == 1:
        assert [m.timestamp for m in msgs[:-1]] == [ts for _, ts, _, _ in SAMPLE]
    entries = list(iter_legacy_entries(legacy))
    assert len(entries) == (2 if codec else 9)
    up = RecordBatch(convert_to_v2(legacy))
    up.validate()
    assert up.compression_type == codec
    assert [(r.key, r.value) for r in up] == [(m.key, m.value) for m in msgs]
    assert all(r.headers == [] for r in up)


def test_down_conversion_keeps_log_append_time_in_v1():
    b = RecordBatchBuilder()
    b.append(1, b"k", b"v")
    buf = bytearray(b.build())
    RecordBatch(buf).set_max_timestamp(12345, LOG_APPEND_TIME)
    (m,) = iter_legacy_messages(convert_from_v2(buf, 1))
    assert m.timestamp == 12345 and m.timestamp_type == LOG_APPEND_TIME


def test_down_conversion_ignores_a_partial_tail():
    b = RecordBatchBuilder()
    b.append(1, b"k", b"v")
    one = b.build()
    assert list(iter_legacy_messages(convert_from_v2(one + one[:30], 1))) == list(
        iter_legacy_messages(convert_from_v2(one, 1))
    )


def test_zstd_cannot_be_down_converted_or_carried():
    b = RecordBatchBuilder(compression_type=4)
    b.append(1, b"k", b"v")
    with pytest.raises(KafkaError) as e:
        convert_from_v2(b.build(), 1)
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    wrapper = encode_message(1, 0, 0, None, b"whatever", 4)
    with pytest.raises(KafkaError) as e:
        list(iter_legacy_messages(wrapper))
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_up_conversion_of_empty_set_and_explicit_codec():
    assert convert_to_v2(b"") == b""
    data = build_message_set(1, SAMPLE, 1)
    batch = RecordBatch(convert_to_v2(data, compression_type=0, base_offset=5))
    assert batch.compression_type == 0 and batch.base_offset == 5
    assert [r.value for r in batch] == [v for _, _, _, v in SAMPLE]


# --- malformed input ------------------------------------------------------------------------


def test_crc_mismatch_is_corrupt():
    data = bytearray(build_message_set(1, SAMPLE[:2]))
    data[30] ^= 1
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(data))
    assert len(list(iter_legacy_messages(data, verify_crc=False))) == 2


@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_truncation_is_corrupt_or_tolerated_as_tail(codec):
    data = build_message_set(1, SAMPLE, codec)
    first_len = 12 + struct.unpack_from(">i", data, 8)[0]
    for cut in range(1, len(data)):
        torn = data[:-cut]
        boundaries = {e.offset for e in iter_legacy_entries(torn, allow_partial_tail=True)}
        if codec == 0 and len(torn) == sum(
            len(encode_message(1, o, ts, k, v)) for o, ts, k, v in SAMPLE[: len(boundaries)]
        ):
            continue  # cut exactly between two messages: a valid shorter set
        with pytest.raises(CorruptRecordError):
            list(iter_legacy_messages(torn))
        tail = list(iter_legacy_entries(torn, allow_partial_tail=True))
        assert all(e.offset >= 0 for e in tail)
        if len(torn) >= first_len and codec == 0:
            assert tail


def test_bad_magic_size_and_lengths():
    msg = bytearray(encode_message(0, 0, -1, b"k", b"v"))
    bad_magic = bytearray(msg)
    bad_magic[16] = 2
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_entries(bad_magic))
    small = bytearray(msg)
    struct.pack_into(">i", small, 8, 5)
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_entries(small))
    bad_key = bytearray(msg)
    struct.pack_into(">i", bad_key, 18, -7)
    struct.pack_into(">I", bad_key, 12, zlib.crc32(bad_key[16:]))
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_entries(bad_key))
    long_key = bytearray(msg)
    struct.pack_into(">i", long_key, 18, 100)
    struct.pack_into(">I", long_key, 12, zlib.crc32(long_key[16:]))
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_entries(long_key))


def test_nested_wrappers_and_empty_wrappers_are_corrupt():
    inner = build_message_set(0, [(0, -1, None, b"a")], 1)
    nested = encode_message(0, 0, -1, None, zlib.compress(inner), 1)
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(nested))
    empty = encode_message(0, 0, -1, None, zlib.compress(b""), 1)
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(empty))
    no_value = encode_message(0, 0, -1, None, None, 1)
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(no_value))
    garbage = encode_message(0, 0, -1, None, b"not gzip", 1)
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(garbage))


def test_legacy_message_accessors():
    m = LegacyMessage(1, 2, b"k", b"v", magic=1, attributes=0x08 | 2)
    assert m.compression_type == 2 and m.timestamp_type == LOG_APPEND_TIME
    with pytest.raises(ValueError):
        encode_message(2, 0, 0, None, None)
