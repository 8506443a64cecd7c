"""The Spark connector's column-wise record decoder against protocol.records' record-by-record
iteration: every codec, nulls, headers, LogAppendTime, ranges, transactions, bad input."""

from __future__ import annotations

import random

import pytest

pa = pytest.importorskip("pyarrow")

np = pytest.importorskip("numpy")

from connectors.spark.columnar import (  # noqa: E402
    ColumnDecoder,
    _Bytes,
    _varints,
    record_starts,
)
from connectors.spark.schema import source_arrow_schema  # noqa: E402
from connectors.spark.wire_fetch import next_fetch_offset  # noqa: E402
from protocol.legacy_records import build_message_set  # noqa: E402
from protocol.record_builder import RecordBatchBuilder, build_control_batch  # noqa: E402
from protocol.record_format import LOG_APPEND_TIME, CorruptRecordError  # noqa: E402
from protocol.records import iter_batches  # noqa: E402

BASE_TS = 1_700_000_000_000


def decoder(include_headers: bool = True, read_committed: bool = False) -> ColumnDecoder:
    return ColumnDecoder("topic-ä", 7, include_headers, read_committed,
                         source_arrow_schema(include_headers))


def random_blob(rng: random.Random, batches: int, codecs=(0, 1, 2, 3, 4)) -> tuple[bytes, int]:
    blob, offset = bytearray(), 0
    for _ in range(batches):
        ts_type = rng.choice([0, 0, 0, LOG_APPEND_TIME])
        builder = RecordBatchBuilder(compression_type=rng.choice(codecs), base_offset=offset,
                                     timestamp_type=ts_type)
        for _ in range(rng.randint(1, 200)):
            key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 12, 13, 40]))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 400))
            headers = [(rng.choice(["h", "ключ", "x" * 20]),
                        None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 30)))
                       for _ in range(rng.choice([0, 0, 1, 2, 5]))]
            builder.append(BASE_TS + rng.randint(-10_000, 10_000), key, value, headers)
        batch = bytearray(builder.build())
        if ts_type == LOG_APPEND_TIME:  # what a broker does: max timestamp = append time
            from protocol.records import RecordBatch

            RecordBatch(batch).set_max_timestamp(BASE_TS + 99_999, LOG_APPEND_TIME)
        blob += batch
        offset += len(builder)
    return bytes(blob), offset


def expected_rows(blob: bytes, lo: int = 0, hi: int = 1 << 62, headers: bool = True) -> list:
    """The rows protocol.records yields, in the source schema's Python form."""
    rows = []
    for batch in iter_batches(blob):
        if batch.is_control:
            continue
        for r in batch:
            if not lo <= r.offset < hi:
                continue
            row = {"key": r.key if r.key is None else bytes(r.key),
                   "value": r.value if r.value is None else bytes(r.value),
                   "topic": "topic-ä", "partition": 7, "offset": r.offset,
                   "timestamp_ms": r.timestamp,
                   "timestampType": 1 if batch.timestamp_type == LOG_APPEND_TIME else 0}
            if headers:
                row["headers"] = [{"key": k, "value": None if v is None else bytes(v)}
                                  for k, v in r.headers] or None
            rows.append(row)
    return rows


def actual_rows(batch) -> list:
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    out = []
    for row, us in zip(batch.drop_columns(["timestamp"]).to_pylist(), micros, strict=True):
        assert us % 1000 == 0
        row["timestamp_ms"] = us // 1000
        out.append(row)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_decoded_columns_equal_record_iteration(seed):
    rng = random.Random(seed)
    blob, end = random_blob(rng, batches=12)
    for include_headers in (True, False):
        chunk = decoder(include_headers).decode(blob, 0, end)
        assert chunk.next_offset == end
        assert chunk.rows.schema == source_arrow_schema(include_headers)
        assert actual_rows(chunk.rows) == expected_rows(blob, headers=include_headers)


def test_offset_range_cuts_batches_and_partial_tail_is_left_for_the_next_fetch():
    blob, end = random_blob(random.Random(42), batches=6, codecs=(0, 4))
    batches = list(iter_batches(blob))
    lo = batches[1].base_offset + 1
    hi = batches[3].base_offset + 2
    chunk = decoder().decode(blob, lo, hi)
    assert actual_rows(chunk.rows) == expected_rows(blob, lo, hi)
    assert chunk.next_offset == batches[3].last_offset + 1  # scanning stops after the range
    # A response cut in the middle of its last batch: that batch is not decoded.
    cut = blob[: len(blob) - batches[-1].size_in_bytes // 2]
    chunk = decoder().decode(cut, 0, end)
    assert chunk.next_offset == batches[-1].base_offset
    assert next_fetch_offset(cut, 0) == batches[-1].base_offset
    assert actual_rows(chunk.rows) == expected_rows(blob, 0, batches[-1].base_offset)
    assert decoder().decode(b"", 5, 10).rows is None
    assert next_fetch_offset(b"", 5) == 5


def transactional(pid: int, base: int, values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0,
                                 is_transactional=True, base_offset=base)
    for v in values:
        builder.append(BASE_TS, None, v)
    return builder.build()


def test_read_committed_drops_aborted_transactions_and_markers():
    blob = b"".join([
        transactional(1, 0, [b"a0", b"a1"]),                # pid 1: aborted below
        transactional(2, 2, [b"c0"]),                       # pid 2: committed
        build_control_batch("abort", 1, 0, 0, BASE_TS, base_offset=3),
        transactional(1, 4, [b"a2"]),                       # pid 1 again: committed
        build_control_batch("commit", 2, 0, 0, BASE_TS, base_offset=5),
        build_control_batch("commit", 1, 0, 0, BASE_TS, base_offset=6),
    ])
    committed = decoder(read_committed=True).decode(blob, 0, 7, aborted=[(1, 0)])
    assert [r["value"] for r in committed.rows.to_pylist()] == [b"c0", b"a2"]
    assert committed.next_offset == 7
    uncommitted = decoder(read_committed=False).decode(blob, 0, 7, aborted=[(1, 0)])
    assert [r["value"] for r in uncommitted.rows.to_pylist()] == [b"a0", b"a1", b"c0", b"a2"]
    # The aborted set lives across responses: the marker may come in a later one.
    d = decoder(read_committed=True)
    first, rest = blob[: len(transactional(1, 0, [b"a0", b"a1"]))], blob[len(
        transactional(1, 0, [b"a0", b"a1"])):]
    assert d.decode(first, 0, 7, aborted=[(1, 0)]).rows is None
    assert [r["value"] for r in d.decode(rest, 2, 7).rows.to_pylist()] == [b"c0", b"a2"]


def test_long_varints_and_big_values():
    builder = RecordBatchBuilder(base_offset=10)
    builder.append(0, b"k" * 300, b"v" * 70_000, [("h", b"x" * 200)])  # 3-byte lengths
    builder.append(1 << 40, None, b"2004")  # a 6-byte varlong
    builder.append(-(1 << 40), b"", b"")
    blob = builder.build()
    rows = decoder().decode(blob, 0, 100).rows
    assert actual_rows(rows) == expected_rows(blob)
    assert rows.column("offset").to_pylist() == [10, 11, 12]
    # Varints longer than the 8 bytes read at once (only timestamps that overflow Spark's
    # microseconds can be) are decoded one by one.
    from protocol.record_format import encode_varint

    data = bytearray()
    for v in (1, -(1 << 60), 300, (1 << 62) + 5):
        encode_varint(v, data)
    starts = np.array([0, 1, 10, 12])
    values, after = _varints(_Bytes(bytes(data) + bytes(16)), starts, 10)
    assert values.tolist() == [1, -(1 << 60), 300, (1 << 62) + 5]
    assert after.tolist() == [1, 10, 12, 22]


def test_headers_keys_that_are_not_utf8_are_replaced_like_javas_string():
    builder = RecordBatchBuilder()
    builder.append(BASE_TS, None, b"v", [(b"\xff\xfeok", b"1")])
    headers = decoder().decode(builder.build(), 0, 1).rows.column("headers").to_pylist()
    assert headers == [[{"key": "\ufffd\ufffdok", "value": b"1"}]]


def test_legacy_message_sets_are_decoded_too():
    blob = build_message_set(1, [(5, BASE_TS, b"k", b"v1"), (6, BASE_TS + 1, None, b"v2")])
    blob += build_message_set(1, [(7, BASE_TS + 2, b"z", None)], compression_type=1)
    chunk = decoder().decode(blob, 6, 100)
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in
            chunk.rows.to_pylist()] == [(6, None, b"v2", None), (7, b"z", None, None)]
    assert chunk.next_offset == 8 == next_fetch_offset(blob, 0)


def test_corrupt_records_raise_corrupt_record_error():
    builder = RecordBatchBuilder()
    for i in range(5):
        builder.append(BASE_TS, b"k%d" % i, b"value %d" % i)
    good = bytearray(builder.build())
    # A record length that runs past the batch (the first record's length byte).
    bad = bytearray(good)
    bad[61] = 0x7E
    with pytest.raises(CorruptRecordError):
        decoder().decode(bytes(bad), 0, 5)
    # A key length that does not fit its record.
    bad = bytearray(good)
    bad[61 + 1 + 1 + 1 + 1] = 0x40
    with pytest.raises(CorruptRecordError):
        decoder().decode(bytes(bad), 0, 5)
    # recordsCount larger than the records present.
    bad = bytearray(good)
    bad[60] = 9
    with pytest.raises(CorruptRecordError):
        decoder().decode(bytes(bad), 0, 5)
    with pytest.raises(CorruptRecordError):
        record_starts(b"\x02\x00", 3)
