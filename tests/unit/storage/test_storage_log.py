import os

import pytest

from protocol.errors import ErrorCode, KafkaError
from protocol.record_format import LOG_APPEND_TIME
from protocol.records import RecordBatch, iter_batches
from storage.config import LogConfig

from .conftest import build_batch


def all_batches(log):
    """Every batch, reading segment by segment (one read never crosses a segment)."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        got = list(iter_batches(log.read(offset, 1 << 30).records.read_bytes()))
        out.extend(got)
        offset = got[-1].last_offset + 1
    return out


def test_append_assigns_offsets_stamps_epoch_and_keeps_bytes(make_log, small_config):
    log = make_log(small_config)
    sent = [build_batch(n=2 + i % 3, ts=1000 + i) for i in range(30)]
    originals = [bytes(b) for b in sent]
    infos = [log.append_as_leader(b, leader_epoch=7) for b in sent]
    expected = 0
    for info, b in zip(infos, sent, strict=True):
        n = RecordBatch(b).record_count
        assert (info.first_offset, info.last_offset) == (expected, expected + n - 1)
        expected += n
    assert log.log_end_offset == expected
    on_disk = all_batches(log)
    assert len(on_disk) == 30
    for got, orig, info in zip(on_disk, originals, infos, strict=True):
        assert got.base_offset == info.first_offset
        assert got.partition_leader_epoch == 7
        got.validate()
        raw = bytes(got.buffer)
        assert raw[8:12] == orig[8:12] and raw[16:] == orig[16:]  # only offset/epoch patched
    assert log.num_segments > 1  # 4000-byte segments
    assert log.leader_epoch_cache.entries == [(7, 0)]
    log.close()


def test_log_append_time(make_log, tmp_path, clock):
    cfg = LogConfig(message_timestamp_type="LogAppendTime")
    log = make_log(cfg)
    info = log.append_as_leader(build_batch(ts=5), 0)
    assert info.log_append_time == clock.now
    (b,) = all_batches(log)
    assert b.timestamp_type == LOG_APPEND_TIME and b.max_timestamp == clock.now
    b.validate()
    assert all(r.timestamp == clock.now for r in b)
    log.close()


def test_append_rejects_bad_input(make_log, tmp_path, clock):
    log = make_log(LogConfig(max_message_bytes=500, segment_bytes=2000))
    bad = build_batch()
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(bad, 0)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(build_batch()[:-3], 0)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(build_batch(n=20), 0)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    many = b"".join(build_batch(n=2) for _ in range(20))
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(bytearray(many), 0)
    assert e.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    log.close()


def test_read_ranges_and_mid_batch(make_log, tmp_path, clock, small_config):
    log = make_log(small_config)
    for i in range(40):
        log.append_as_leader(build_batch(n=5, ts=1000 + i), 0)
    assert log.log_end_offset == 200
    for bad in (-1, 201):
        with pytest.raises(KafkaError) as e:
            log.read(bad, 1000)
        assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert len(log.read(200, 1000).records) == 0
    for start in range(0, 200, 7):
        got = log.read(start, 1, min_one_message=True)
        (b,) = list(iter_batches(got.records.read_bytes()))
        assert b.base_offset <= start <= b.last_offset  # the whole batch holding `start`
        assert got.fetch_offset == b.base_offset
    assert len(log.read(0, 10, min_one_message=False).records) == 10
    # max_offset (e.g. the high watermark) is exclusive
    got = list(iter_batches(log.read(0, 1 << 20, max_offset=30).records.read_bytes()))
    assert got[-1].last_offset == 29
    got = list(iter_batches(log.read(120, 1 << 20, max_offset=150).records.read_bytes()))
    assert got[0].base_offset == 120 and got[-1].last_offset == 149
    assert len(log.read(100, 1000, max_offset=100).records) == 0
    log.close()


def test_read_returns_file_slices_not_bytes(make_log, tmp_path, clock, small_config):
    log = make_log(small_config)
    log.append_as_leader(build_batch(), 0)
    info = log.read(0, 1 << 20)
    ((f, pos, length),) = info.records.slices
    assert pos == 0 and length == len(info.records) == log.active_segment.size
    assert os.pread(f.fileno(), length, pos) == info.records.read_bytes()
    log.close()


def test_roll_by_segment_ms_uses_batch_timestamps(make_log, tmp_path, clock):
    log = make_log(LogConfig(segment_ms=1000))
    log.append_as_leader(build_batch(ts=10_000), 0)
    log.append_as_leader(build_batch(ts=10_900), 0)
    assert log.num_segments == 1
    log.append_as_leader(build_batch(ts=11_500), 0)
    assert log.num_segments == 2 and log.active_segment.base_offset == 6
    log.close()


def test_roll_when_index_full(make_log, tmp_path, clock):
    cfg = LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 4)
    log = make_log(cfg)
    for _ in range(12):
        log.append_as_leader(build_batch(n=1), 0)
    assert log.num_segments >= 2
    for seg in log.segments[:-1]:
        assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
    log.close()


def test_roll_on_relative_offset_overflow(make_log, tmp_path, clock):
    log = make_log(LogConfig())
    log.append_as_leader(build_batch(n=1), 0)
    far = build_batch(n=1)
    RecordBatch(far).set_base_offset(1 << 31)
    log.append_as_follower(far)
    assert [s.base_offset for s in log.segments] == [0, 1 << 31]
    assert log.log_end_offset == (1 << 31) + 1
    assert log.read(1 << 31, 1000).fetch_offset == 1 << 31
    log.close()


def test_follower_append_keeps_offsets_and_rejects_going_back(make_log, tmp_path, clock):
    log = make_log(LogConfig())
    b = build_batch(n=2)
    RecordBatch(b).set_base_offset(10)
    RecordBatch(b).set_partition_leader_epoch(3)
    log.append_as_follower(b)
    assert log.log_end_offset == 12
    assert log.leader_epoch_cache.entries == [(3, 10)]
    old = build_batch(n=1)
    RecordBatch(old).set_base_offset(11)
    with pytest.raises(KafkaError):
        log.append_as_follower(old)
    log.close()


def test_retention_by_time_and_bytes_never_active(make_log, tmp_path, clock, small_config):
    log = make_log(small_config)
    for i in range(60):
        log.append_as_leader(build_batch(n=3, ts=clock.now - 100_000 + i), 0)
    log.high_watermark = log.log_end_offset
    n_before = log.num_segments
    assert n_before > 3
    import dataclasses
    log.config = dataclasses.replace(small_config, retention_ms=200_000)
    assert log.delete_old_segments() == 0
    log.config = dataclasses.replace(small_config, retention_bytes=small_config.segment_bytes * 2)
    deleted = log.delete_old_segments()
    assert deleted > 0 and log.size_in_bytes <= small_config.segment_bytes * 2 + 4000
    assert log.log_start_offset == log.segments[0].base_offset > 0
    log.config = dataclasses.replace(small_config, retention_ms=1000)
    log.delete_old_segments()
    assert log.num_segments == 1  # everything expired, but the active segment stays
    assert log.log_start_offset == log.active_segment.base_offset
    with pytest.raises(KafkaError) as e:
        log.read(0, 100)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert not [n for n in os.listdir(log.dir) if n.endswith(".deleted")]
    log.close()


def test_delete_records_before(make_log, tmp_path, clock, small_config):
    log = make_log(small_config)
    for _ in range(50):
        log.append_as_leader(build_batch(n=2), 0)
    log.high_watermark = 60
    with pytest.raises(KafkaError) as e:
        log.delete_records_before(61)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records_before(41) == 41
    assert log.segments[0].base_offset <= 41
    got = log.read(41, 1)
    assert got.fetch_offset == 40  # batch 40..41 returned whole
    with pytest.raises(KafkaError):
        log.read(40, 1)
    log.close()


def test_truncate_to_and_fully(make_log, tmp_path, clock, small_config):
    log = make_log(small_config)
    for i in range(50):
        log.append_as_leader(build_batch(n=2), 1 if i < 25 else 2)
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 50)]
    log.high_watermark = 100
    assert log.truncate_to(31)  # mid-batch (30..31): that batch stays whole
    assert log.log_end_offset == 32 and log.high_watermark == 32
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert all_batches(log)[-1].last_offset == 31
    assert log.active_segment.offset_index.max_entries == small_config.segment_index_bytes // 8
    info = log.append_as_leader(build_batch(n=1), 3)
    assert info.first_offset == 32
    assert not log.truncate_to(1000)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (500, 500, 1)
    assert log.leader_epoch_cache.entries == []
    assert log.append_as_leader(build_batch(n=1), 4).first_offset == 500
    log.close()
    names = sorted(os.listdir(log.dir))
    assert "00000000000000000500.log" in names and "00000000000000000000.log" not in names


def test_fetch_offset_by_timestamp(make_log, tmp_path, clock, small_config):
    log = make_log(small_config)
    for i in range(40):
        log.append_as_leader(build_batch(n=3, ts=10_000 + 10 * i), 0)
    assert log.fetch_offset_by_timestamp(-2) == (0, -1)
    assert log.fetch_offset_by_timestamp(-1) == (120, -1)
    assert log.fetch_offset_by_timestamp(-3) == (119, 10_392)
    assert log.fetch_offset_by_timestamp(0) == (0, 10_000)
    assert log.fetch_offset_by_timestamp(10_201) == (61, 10_201)
    assert log.fetch_offset_by_timestamp(10_205) == (63, 10_210)
    assert log.fetch_offset_by_timestamp(99_999) is None
    log.close()


def test_max_timestamp_is_the_record_not_the_batch_end(make_log, small_config):
    """KAFKA-16310: ListOffsets MAX_TIMESTAMP answers the record with the largest timestamp
    (the first one if several), not the last offset of its batch."""
    from protocol.record_builder import RecordBatchBuilder
    log = make_log(small_config)
    log.append_as_leader(build_batch(n=3, ts=1000), 0)          # offsets 0-2
    b = RecordBatchBuilder()
    for ts in (2000, 9000, 3000, 9000):                          # offsets 3-6
        b.append(ts, b"k", b"v")
    log.append_as_leader(bytearray(b.build()), 0)
    log.append_as_leader(build_batch(n=2, ts=5000), 0)          # offsets 7-8
    assert log.fetch_offset_by_timestamp(-3) == (4, 9000)
    log.close()


def test_reopen_clean_keeps_everything(make_log, tmp_path, clock, small_config):
    log = make_log(small_config)
    for i in range(50):
        log.append_as_leader(build_batch(n=2, ts=5000 + i), 4)
    before = [bytes(b.buffer) for b in all_batches(log)]
    log.flush()
    log.close()
    log = make_log(small_config, clean_shutdown=True)
    assert log.log_end_offset == 100 and log.recovery_point == 100
    assert [bytes(b.buffer) for b in all_batches(log)] == before
    assert log.leader_epoch_cache.entries == [(4, 0)]
    assert log.fetch_offset_by_timestamp(5049) == (97, 5049)
    log.close()


def test_retention_stops_at_the_high_watermark(make_log, clock, small_config):
    import dataclasses
    log = make_log(dataclasses.replace(small_config, retention_ms=1))
    for i in range(60):
        log.append_as_leader(build_batch(n=3, ts=1000 + i), 0)
    second = log.segments[1]
    log.high_watermark = second.base_offset + 3  # inside the second segment
    assert log.delete_old_segments() == 1
    assert log.segments[0] is second and log.log_start_offset == second.base_offset
