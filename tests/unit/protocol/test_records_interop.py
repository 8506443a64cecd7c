"""Cross-checks with kafka-python's and aiokafka's record batch code, all codecs."""

import warnings

import pytest

from protocol.record_builder import RecordBatchBuilder, build_control_batch
from protocol.records import RecordBatch

with warnings.catch_warnings():
    # kafka-python 3.0.12 uses importlib.resources.read_text (deprecated) at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as AioBuilder
    from aiokafka.record.default_records import _DefaultRecordBatchPy as AioBatch
    from kafka.record.default_records import DefaultRecordBatch as KpBatch
    from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

CODECS = [0, 1, 2, 3, 4]


def sample_records():
    """(timestamp ms, key, value, headers) covering nulls, empties, headers, a large value."""
    out = []
    for i in range(20):
        key = None if i % 5 == 1 else f"key-{i}".encode()
        value = None if i % 7 == 3 else (b"v%d-" % i) * (i * 13)
        headers = [("h-text", b"v1"), ("h-null", None), ("h-empty", b"")] if i % 2 else []
        out.append((1_700_000_000_000 + i * 3, key, value, headers))
    out.append((1_700_000_000_100, b"big", bytes(range(256)) * 600, [("ü", b"\xff")]))
    return out


def _our_view(data):
    batch = RecordBatch(data)
    batch.validate()
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]


def _expected(base_offset=0):
    return [
        (base_offset + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(sample_records())
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_parse(codec):
    b = KpBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=True,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        batch_size=1 << 22,
    )
    for i, (ts, k, v, h) in enumerate(sample_records()):
        b.append(i, timestamp=ts, key=k, value=v, headers=h)
    data = bytes(b.build())
    assert _our_view(data) == _expected()
    batch = RecordBatch(data)
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 17)
    assert batch.is_transactional and not batch.is_control


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_batches_parse(codec):
    b = AioBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 22,
    )
    for i, (ts, k, v, h) in enumerate(sample_records()):
        b.append(i, timestamp=ts, key=k, value=v, headers=h)
    data = bytes(b.build())
    assert _our_view(data) == _expected()
    assert RecordBatch(data).compression_type == codec


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_parse_with_kafka_python(codec):
    builder = RecordBatchBuilder(
        compression_type=codec, producer_id=9, producer_epoch=1, base_sequence=5, base_offset=100
    )
    for ts, k, v, h in sample_records():
        builder.append(ts, k, v, h)
    data = builder.build()
    kb = KpBatch(bytearray(data))
    assert kb.validate_crc()
    assert kb.compression_type == codec
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (9, 1, 5)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb]
    assert got == _expected(100)
    assert _our_view(data) == _expected(100)


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_parse_with_aiokafka(codec):
    builder = RecordBatchBuilder(compression_type=codec, base_offset=7)
    for ts, k, v, h in sample_records():
        builder.append(ts, k, v, h)
    data = builder.build()
    ab = AioBatch(bytearray(data))
    assert ab.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in ab]
    assert got == _expected(7)


def test_our_control_batch_parses_with_kafka_python():
    data = build_control_batch("abort", 11, 2, 5, 1_700_000_000_000, base_offset=30)
    kb = KpBatch(bytearray(data))
    assert kb.validate_crc()
    assert kb.is_control_batch and kb.is_transactional
    (rec,) = list(kb)
    # kafka-python decodes control records into a ControlRecord with key (version, type)
    assert rec.offset == 30
    assert rec.abort is True


def test_our_log_append_time_batch_with_kafka_python():
    builder = RecordBatchBuilder()
    for ts, k, v, h in sample_records()[:3]:
        builder.append(ts, k, v, h)
    buf = bytearray(builder.build())
    RecordBatch(buf).set_max_timestamp(1_800_000_000_000, 1)
    kb = KpBatch(bytearray(buf))
    assert kb.validate_crc()
    assert kb.timestamp_type == 1
    assert {r.timestamp for r in kb} == {1_800_000_000_000}
