"""Log compaction with transactions (Kafka's CleanedTransactionMetadata): data of aborted
transactions is removed, committed transactional data is compacted like any data, an ABORT
marker stays (and keeps its `.txnindex` entry in the cleaned segment) while data of its
transaction is left, then gets a delete horizon and is removed after
delete.retention.ms; a producer's last batch survives empty."""

import pytest

from protocol.record_builder import RecordBatchBuilder, build_control_batch
from protocol.records import iter_batches
from storage.cleaner_batches import iter_file_batches
from storage.config import LogConfig
from storage.log_manager import LogManager

TP = ("compacted-txn", 0)
CFG = LogConfig(cleanup_policy="compact", segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.01,
                delete_retention_ms=10_000, file_delete_delay_ms=0)


def data(pairs, ts, pid=-1, seq=-1, transactional=False):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=seq, is_transactional=transactional)
    for k, v in pairs:
        b.append(ts, k, v)
    return bytearray(b.build())


def marker(kind, pid, ts):
    return bytearray(build_control_batch(kind, pid, 0, coordinator_epoch=1, timestamp=ts))


def batches(lg):
    out = []
    for seg in lg.segments:
        for _, b in iter_file_batches(seg.log_file.fd, 0, seg.size, 4096):
            b.validate()
            out.append(b)
    return out


def values(lg):
    return [(r.key, r.value) for b in batches(lg) if not b.is_control for r in b]


def markers(lg):
    return [(b.producer_id, b.control_record().is_commit, b.has_delete_horizon)
            for b in batches(lg) if b.is_control and b.record_count]


@pytest.fixture
async def manager(tmp_path, clock):
    lm = LogManager([str(tmp_path / "d")], CFG, time_ms=clock)
    await lm.startup(background=False)
    yield lm
    await lm.shutdown()


async def clean(manager, lg, clock, filler: int):
    """Append a little plain data (so the log is dirty), roll, and run one pass."""
    lg.append_as_leader(data([(b"filler", b"%d" % filler)], clock()), 0)
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    assert await manager.cleaner.clean_once()


async def test_aborted_data_and_markers_are_cleaned_as_kafka_does(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    ts = clock()
    lg.append_as_leader(data([(b"a", b"a1"), (b"b", b"b1")], ts, 1, 0, True), 0)   # 0-1
    lg.append_as_leader(data([(b"c", b"c1")], ts, 2, 0, True), 0)                 # 2
    lg.append_as_leader(marker("commit", 1, ts), 0, origin="coordinator")         # 3
    lg.append_as_leader(marker("abort", 2, ts), 0, origin="coordinator")          # 4
    lg.append_as_leader(data([(b"a", b"a2")], ts), 0)                             # 5
    lg.append_as_leader(data([(b"d", b"d1")], ts, 2, 1, True), 0)                 # 6
    lg.append_as_leader(marker("commit", 2, ts), 0, origin="coordinator")         # 7
    assert lg.collect_aborted_transactions(0, 8) == [(2, 2)]

    await clean(manager, lg, clock, 1)
    assert sorted(values(lg)) == [(b"a", b"a2"), (b"b", b"b1"), (b"d", b"d1"),
                                  (b"filler", b"1")]
    # the aborted batch's transaction was seen in this pass: its marker and index entry stay
    assert markers(lg) == [(1, True, False), (2, False, False), (2, True, False)]
    assert [t.producer_id for s in lg.segments for t in s.txn_index.entries] == [2]
    committed_a = [b for b in batches(lg) if not b.is_control and b.producer_id == 1][0]
    assert committed_a.is_transactional and [r.key for r in committed_a] == [b"b"]

    await clean(manager, lg, clock, 2)
    # no data of the aborted transaction is left: its marker starts its delete retention
    assert markers(lg) == [(1, True, False), (2, False, True), (2, True, False)]
    assert [t for s in lg.segments for t in s.txn_index.entries] == []

    clock.advance(CFG.delete_retention_ms + 1)
    await clean(manager, lg, clock, 3)
    assert markers(lg) == [(1, True, False), (2, True, False)]
    # a consumer still reads the committed data at their original offsets
    got = lg.read(0, 1 << 20).records.read_bytes()
    offsets = [r.offset for b in iter_batches(got) if not b.is_control for r in b]
    assert offsets[:3] == [1, 5, 6]


async def test_a_producers_last_aborted_batch_survives_empty(manager, clock):
    lg = manager.get_or_create_log(TP, CFG)
    ts = clock()
    lg.append_as_leader(data([(b"x", b"x1")], ts, 9, 0, True), 0)
    lg.append_as_leader(marker("abort", 9, ts), 0, origin="coordinator")
    await clean(manager, lg, clock, 1)
    kept = [b for b in batches(lg) if b.producer_id == 9 and not b.is_control]
    assert len(kept) == 1 and kept[0].record_count == 0 and kept[0].base_sequence == 0
    assert values(lg) == [(b"filler", b"1")]
    reloaded_last = lg.producer_state.last_entry(9)
    assert reloaded_last.producer_epoch == 0
