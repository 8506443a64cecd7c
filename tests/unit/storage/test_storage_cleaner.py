"""Log compaction (storage.cleaner): which records survive, offsets, tombstones and their
delete horizon (KIP-534), compaction lag, codecs, producer state, the checkpoint, the
`.cleaned`/`.swap` protocol and its crash recovery, and aborting when the log changes."""

import os

import pytest

from protocol.record_builder import RecordBatchBuilder
from protocol.records import iter_batches
from storage.checkpoints import OffsetCheckpointFile
from storage.cleaner import CLEANER_CHECKPOINT, Cleaner, CleanerConfig, log_to_clean
from storage.cleaner_batches import OffsetMap, iter_file_batches
from storage.config import LogConfig
from storage.log import Log
from storage.log_manager import LogManager
from storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX

TP = ("compacted", 0)
CFG = LogConfig(cleanup_policy="compact", segment_bytes=2048, min_cleanable_dirty_ratio=0.01,
                delete_retention_ms=10_000, file_delete_delay_ms=0)


def batch(pairs, ts, codec=0, pid=-1, epoch=-1, seq=-1):
    b = RecordBatchBuilder(compression_type=codec, producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq)
    for k, v in pairs:
        b.append(ts, k, v, [("h", b"x")])
    return bytearray(b.build())


def records(lg: Log):
    out = []
    for seg in lg.segments:
        for _, b in iter_file_batches(seg.log_file.fd, 0, seg.size, 4096):
            b.validate()
            out.extend((r.offset, r.key, r.value) for r in b)
    return out


def consume(lg: Log):
    """Fetch from offset 0 to the log end as a consumer does (gaps skipped)."""
    out, pos = [], 0
    while pos < lg.log_end_offset:
        got = lg.read(pos, 1 << 20).records.read_bytes()
        for b in iter_batches(got):
            out.extend(r for r in b if r.offset >= pos)
            pos = b.next_offset
    return out


def latest(recs):
    last = {}
    for off, k, v in recs:
        last[k] = (off, v)
    return last


@pytest.fixture
async def manager(tmp_path, clock):
    lm = LogManager([str(tmp_path / "d")], CFG, time_ms=clock)
    await lm.startup(background=False)
    yield lm
    await lm.shutdown()


def fill(lg, clock, n=60, keys=4, start=0, tombstone_key=None):
    for i in range(start, start + n):
        k = f"k{i % keys}".encode()
        v = None if k == tombstone_key else f"v{i}".encode() * 10
        lg.append_as_leader(batch([(k, v)], clock()), 0)
        clock.advance(1)
    lg.high_watermark = lg.log_end_offset


async def test_keeps_latest_value_per_key_and_offsets(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    fill(lg, clock)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    before = records(lg)
    assert await manager.cleaner.clean_once()
    after = records(lg)
    assert latest(after) == latest(before)
    assert len(after) == 4 and [o for o, _, _ in after] == [56, 57, 58, 59]
    assert lg.log_end_offset == 60
    assert [(r.offset, r.headers) for r in consume(lg)] == [(o, [("h", b"x")])
                                                            for o in (56, 57, 58, 59)]
    ckpt = OffsetCheckpointFile(os.path.join(manager.log_dirs[0], CLEANER_CHECKPOINT)).read()
    assert ckpt == {TP: 60}
    assert not await manager.cleaner.clean_once()  # nothing dirty any more
    fill(lg, clock, n=8, start=60)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    assert [o for o, _, _ in records(lg)] == [64, 65, 66, 67]


async def test_active_segment_and_above_hw_never_cleaned(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    fill(lg, clock)
    n_active = sum(1 for o, _, _ in records(lg) if o >= lg.active_segment.base_offset)
    lg.high_watermark = lg.segments[1].base_offset  # only the first segment is below it
    ltc = log_to_clean(TP, lg, None, clock())
    assert ltc.first_uncleanable_offset == lg.segments[1].base_offset
    assert [s for s, _, _ in ltc.segments] == [lg.segments[0]]
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    assert sum(1 for o, _, _ in records(lg) if o >= lg.active_segment.base_offset) == n_active


async def test_ratio_and_min_compaction_lag(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    fill(lg, clock)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    fill(lg, clock, n=2, start=60)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    ltc = manager.cleaner.grab_filthiest(clock())
    assert ltc.first_dirty_offset == 60 and ltc.clean_bytes > 0
    assert 0.01 < ltc.cleanable_ratio < 0.5
    lg.config = LogConfig(**{**CFG.__dict__, "min_cleanable_dirty_ratio": 0.5})
    assert manager.cleaner.grab_filthiest(clock()) is None  # not dirty enough
    fill(lg, clock, n=60, start=62)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    lg.config = LogConfig(**{**CFG.__dict__, "min_compaction_lag_ms": 1000})
    assert manager.cleaner.grab_filthiest(clock()) is None  # every record is newer than 1 s
    clock.advance(2000)
    assert manager.cleaner.grab_filthiest(clock()) is not None


async def test_cleaner_follows_config_changes_and_new_logs(manager, clock):
    """The cleaner lists the compacted logs once and lists them again after a log's config
    or the set of logs changed: a topic switched to compact (or back) is seen at once."""
    delete = LogConfig(**{**CFG.__dict__, "cleanup_policy": "delete"})
    lg = manager.get_or_create_log(("plain", 0), delete)
    fill(lg, clock)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert manager.cleaner.grab_filthiest(clock()) is None
    assert manager.cleaner.grab_filthiest(clock()) is None  # the cached list, still empty
    lg.config = CFG  # cleanup.policy=compact from now on
    assert manager.cleaner.grab_filthiest(clock()).tp == ("plain", 0)
    lg.config = delete
    assert manager.cleaner.grab_filthiest(clock()) is None
    other = manager.get_or_create_log(TP, CFG)  # a new compacted log
    fill(other, clock)
    other.roll()
    other.high_watermark = other.log_end_offset
    assert manager.cleaner.grab_filthiest(clock()).tp == TP
    manager.delete_log(TP)
    assert manager.cleaner.grab_filthiest(clock()) is None


async def test_tombstone_removed_after_delete_horizon(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    fill(lg, clock, tombstone_key=b"k1")
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    recs = records(lg)
    assert (57, b"k1", None) in recs  # kept until its delete horizon
    horizon_batches = [b for s in lg.segments for _, b in iter_file_batches(s.log_file.fd, 0, s.size, 4096)
                       if b.has_delete_horizon]
    assert [b.base_timestamp for b in horizon_batches] == [clock() + CFG.delete_retention_ms]
    assert [r.timestamp for b in horizon_batches for r in b] == [1_700_000_000_000 + 57]
    fill(lg, clock, n=4, start=60, keys=1)  # more dirty data so the log is chosen again
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    assert (57, b"k1", None) in records(lg)  # horizon not reached
    clock.advance(CFG.delete_retention_ms)
    fill(lg, clock, n=4, start=64, keys=1)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    assert all(k != b"k1" for _, k, _ in records(lg))


async def test_codec_producer_fields_and_empty_last_batch(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    for i in range(6):  # idempotent producer 7, two records per batch, gzip
        lg.append_as_leader(batch([(b"a", b"%d" % i), (b"b", b"%d" % i)], clock(), codec=1,
                                  pid=7, epoch=0, seq=2 * i), 0)
    lg.append_as_leader(batch([(b"a", b"new"), (b"b", b"new")], clock()), 0)  # no producer
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    batches = [b for s in lg.segments for _, b in iter_file_batches(s.log_file.fd, 0, s.size, 4096)]
    # producer 7's last batch (offsets 10-11) stays as an empty batch: its sequence survives
    assert [(b.base_offset, b.last_offset, b.record_count, b.producer_id, b.base_sequence)
            for b in batches if b.producer_id == 7] == [(10, 11, 0, 7, 10)]
    assert [(r.offset, r.value) for b in batches for r in b] == [(12, b"new"), (13, b"new")]
    lg.append_as_leader(batch([(b"a", b"z")], clock(), pid=7, epoch=0, seq=12), 0)
    lg.flush()
    reloaded = Log(lg.dir, CFG, clean_shutdown=False)
    assert reloaded.producer_state.last_entry(7).last_seq == 12
    reloaded.close()


async def test_compressed_partial_batch_keeps_codec(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    lg.append_as_leader(batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], clock(), codec=2), 0)
    lg.append_as_leader(batch([(b"a", b"2")], clock()), 0)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()
    _, first = next(iter_file_batches(lg.segments[0].log_file.fd, 0, lg.segments[0].size, 4096))
    assert first.compression_type == 2 and first.last_offset == 2 and first.record_count == 2
    assert [(r.offset, r.key) for r in first] == [(1, b"b"), (2, b"c")]


async def test_swap_abandoned_when_log_truncated(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    fill(lg, clock)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    ltc = log_to_clean(TP, lg, None, clock())
    result = Cleaner(CleanerConfig(), manager.cleaner.stopping).clean(ltc, clock(), {})
    lg.truncate_to(lg.segments[1].base_offset + 1)  # a follower truncation meanwhile
    before = records(lg)
    assert not await manager.cleaner._swap(ltc, result)  # no group swapped, not even
    # the unchanged first one: its records were judged against truncated ones
    assert records(lg) == before
    assert not [n for n in os.listdir(lg.dir) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]


async def test_interrupted_swap_completed_or_rolled_back(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    fill(lg, clock)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    before = records(lg)
    ltc = log_to_clean(TP, lg, None, clock())
    result = Cleaner(CleanerConfig(), manager.cleaner.stopping).clean(ltc, clock(), {})
    for g in result.groups:
        g.new.close()
    lg.flush()
    # crash 1: only .cleaned files exist -> rolled back, the old segments stay
    reloaded = Log(lg.dir, CFG, clean_shutdown=False)
    assert records(reloaded) == before
    reloaded.close()
    # crash 2: the cleaned copies were renamed .swap -> completed on load
    result = Cleaner(CleanerConfig(), manager.cleaner.stopping).clean(ltc, clock(), {})
    for g in result.groups:
        g.new.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        g.new.close()
    reloaded = Log(lg.dir, CFG, clean_shutdown=False)
    assert latest(records(reloaded)) == latest(before)
    assert len(records(reloaded)) == 4
    assert reloaded.log_end_offset == 60
    assert not [n for n in os.listdir(lg.dir) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
    reloaded.close()


def test_offset_map_capacity_and_file_batches(tmp_path):
    m = OffsetMap.for_buffer(24 * 10, 1.0)
    for i in range(10):
        m.put(b"%d" % i, i)
    m.put(b"3", 30)
    assert m.get(b"3") == 30 and m.get(b"x") == -1 and m.latest_offset == 30
    with pytest.raises(Exception, match="full"):
        m.put(b"new", 31)
    data = b"".join(bytes(batch([(b"k", b"v" * n)], 5)) for n in (10, 500, 20))
    p = tmp_path / "f"
    p.write_bytes(data + data[:30])  # torn tail ignored
    fd = os.open(p, os.O_RDONLY)
    try:
        for chunk in (61, 100, 4096):  # batches larger than the chunk are read alone
            got = [len(b.buffer) for _, b in iter_file_batches(fd, 0, len(data) + 30, chunk)]
            assert sum(got) == len(data) and len(got) == 3
    finally:
        os.close(fd)


def test_cleaner_config_from_broker_keys():
    from broker.config import KafkaConfig
    cfg = KafkaConfig({"log.dirs": "/tmp/x", "log.cleaner.backoff.ms": "50",
                       "log.cleaner.threads": "2"})
    cc = CleanerConfig.from_kafka_config(cfg.get)
    assert (cc.backoff_ms, cc.num_threads, cc.enable, cc.io_buffer_size) == (50, 2, True, 524288)
