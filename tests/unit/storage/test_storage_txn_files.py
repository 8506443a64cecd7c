"""Transactions in the log: `.txnindex` and `.snapshot` byte formats (Kafka's), the last
stable offset, aborted-transaction collection, loading from snapshots without a rescan,
recovery rebuilding the aborted index, truncation reopening transactions, KIP-890 guards."""

import os
import struct

import crc32c
import pytest

import storage.loader as loader
from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import RecordBatchBuilder, build_control_batch
from storage.config import LogConfig
from storage.index import CorruptIndexError
from storage.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
)
from storage.transaction_index import AbortedTxn, TransactionIndex


def txn(seq, pid=7, n=2, epoch=0, transactional=True):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=transactional)
    for i in range(n):
        b.append(1000 + i, b"k%d" % i, b"v" * 40)
    return bytearray(b.build())


def marker(kind, pid=7, epoch=0, coordinator_epoch=3):
    return bytearray(build_control_batch(kind, pid, epoch, coordinator_epoch, timestamp=5))


def coord(log, data):
    return log.append_as_leader(data, 0, origin="coordinator")


# --- .txnindex ---------------------------------------------------------------------------------
def test_txn_index_format_and_search(tmp_path):
    path = str(tmp_path / "00000000000000000010.txnindex")
    idx = TransactionIndex(path, 10)
    assert not os.path.exists(path)  # created on the first entry only
    idx.append(AbortedTxn(5, 3, 12, 13))
    idx.append(AbortedTxn(6, 11, 20, 15))
    with open(path, "rb") as f:
        raw = f.read()
    assert len(raw) == 68
    assert raw[:34] == struct.pack(">hqqqq", 0, 5, 3, 12, 13)
    again = TransactionIndex(path, 10)
    assert again.entries == [AbortedTxn(5, 3, 12, 13), AbortedTxn(6, 11, 20, 15)]
    # overlapping [fetch, upper); complete once an entry's LSO reaches the upper bound
    assert again.collect(13, 14) == ([AbortedTxn(6, 11, 20, 15)], True)
    assert again.collect(0, 3) == ([], True)  # LSO 13 >= 3: nothing later can overlap
    assert again.collect(0, 100) == (again.entries, False)
    with pytest.raises(ValueError):
        again.append(AbortedTxn(9, 1, 20, 21))  # marker offsets must increase
    again.truncate_to(20)
    assert os.path.getsize(path) == 34 and again.last_offset == 12
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)  # a torn entry is ignored, then overwritten
    torn = TransactionIndex(path, 10)
    assert len(torn) == 1
    torn.append(AbortedTxn(8, 14, 30, 31))
    assert os.path.getsize(path) == 68 and len(TransactionIndex(path, 10)) == 2


def test_txn_index_sanity_check(tmp_path):
    path = str(tmp_path / "00000000000000000100.txnindex")
    with open(path, "wb") as f:
        f.write(struct.pack(">hqqqq", 0, 1, 50, 60, 61))  # marker before the base offset
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 100).sanity_check()
    with open(path, "wb") as f:
        f.write(struct.pack(">hqqqq", 3, 1, 150, 160, 161))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 100).sanity_check()


# --- .snapshot ---------------------------------------------------------------------------------
def test_snapshot_format_is_kafkas():
    entries = [SnapshotEntry(7, 2, 9, 40, 4, 1234, 3, -1),
               SnapshotEntry(8, 0, -1, -1, 0, 99, -1, 17)]
    data = encode_snapshot(entries)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2)
    assert crc == crc32c.crc32c(data[6:])
    assert len(data) == 10 + 2 * 46
    assert data[10:56] == struct.pack(">qhiqiqiq", 7, 2, 9, 40, 4, 1234, 3, -1)
    assert decode_snapshot(data) == entries
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(bad))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:-3])


# --- the log ---------------------------------------------------------------------------------
def test_lso_follows_open_and_unreplicated_transactions(make_log):
    log = make_log()
    log.append_as_leader(txn(0, pid=1), 0)      # 0-1  pid 1 opens
    log.append_as_leader(txn(0, pid=2), 0)      # 2-3  pid 2 opens
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 0
    coord(log, marker("abort", pid=1))          # 4
    log.high_watermark = 4                      # the marker is not replicated yet
    assert log.last_stable_offset == 0
    log.high_watermark = 5
    assert log.last_stable_offset == 2          # pid 2 still open
    coord(log, marker("commit", pid=2))         # 5
    log.high_watermark = 6
    assert log.last_stable_offset == 6
    seg = log.active_segment
    # the abort entry records the LSO right after it: pid 2's open transaction at 2
    assert seg.txn_index.entries == [AbortedTxn(1, 0, 4, 2)]
    assert log.collect_aborted_transactions(0, 6) == [(1, 0)]


def test_aborted_entries_live_in_the_marker_segment(make_log):
    log = make_log(LogConfig(segment_bytes=400))
    log.append_as_leader(txn(0), 0)
    for i in range(6):
        log.append_as_leader(txn(0, pid=100 + i, transactional=False), 0)
    coord(log, marker("abort"))
    assert log.num_segments > 2
    marker_seg = log.active_segment
    assert [t.producer_id for t in marker_seg.txn_index.entries] == [7]
    assert all(len(s.txn_index) == 0 for s in log.segments[:-1])
    # a fetch from the first segment finds it by searching forward
    assert log.collect_aborted_transactions(0, log.fetch_upper_bound(0)) == [(7, 0)]


def test_clean_reopen_loads_the_snapshot_without_replaying(make_log, tmp_path, monkeypatch):
    log = make_log(LogConfig(segment_bytes=600))
    for i in range(10):
        log.append_as_leader(txn(2 * (i // 3), pid=50 + i % 3, transactional=False), 0)
    log.append_as_leader(txn(0, pid=9), 0)  # left open
    leo = log.log_end_offset
    log.flush()
    log.close()
    d = str(tmp_path / "topic-0")
    assert leo in list_snapshots(d)
    replayed = []
    real = loader.replay_producer_state

    def counting(*a):
        n = real(*a)
        replayed.append(n)
        return n
    monkeypatch.setattr(loader, "replay_producer_state", counting)
    again = make_log(LogConfig(segment_bytes=600), clean_shutdown=True, recovery_point=leo)
    assert replayed == [0]
    assert again.producer_state.first_undecided_offset() == leo - 2
    assert again.producer_state.last_entry(50).last_seq >= 0
    again.high_watermark = again.log_end_offset
    assert again.last_stable_offset == leo - 2


def test_clean_reopen_from_the_directory_listing(make_log, tmp_path):
    """The LogManager's load (`exists=True`) answers "is there a file" from one listing of
    the partition dir: the `.txnindex`, the indexes, the snapshots and the
    `leader-epoch-checkpoint` that exist are still found (and a corrupt `.txnindex` still
    sends its segment to recovery), the absent ones are not looked for."""
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=100)
    log = make_log(cfg)
    log.append_as_leader(txn(0), 3)
    for i in range(6):
        log.append_as_leader(txn(0, pid=100 + i, transactional=False), 3)
    coord(log, marker("abort"))
    for i in range(8):  # roll past the marker segment
        log.append_as_leader(txn(0, pid=200 + i, transactional=False), 4)
    leo, aborted = log.log_end_offset, log.collect_aborted_transactions(0, log.log_end_offset)
    marker_seg = next(s for s in log.segments if len(s.txn_index))
    txn_path = marker_seg.txn_index.path
    indexed = [s.base_offset for s in log.segments if s.offset_index._entries]
    assert aborted == [(7, 0)] and marker_seg is not log.active_segment and indexed
    log.flush()
    log.close()
    d = str(tmp_path / "topic-0")
    again = make_log(cfg, clean_shutdown=True, recovery_point=leo, exists=True)
    assert again.log_end_offset == leo and again.load_result.recovered_segments == 0
    assert again.leader_epoch_cache.entries == log.leader_epoch_cache.entries
    assert again.collect_aborted_transactions(0, leo) == aborted
    assert [s.base_offset for s in again.segments if s.offset_index._entries] == indexed
    assert again.producer_state.last_entry(207) is not None
    again.close()
    with open(txn_path, "r+b") as f:  # the marker before the segment's base offset
        f.write(struct.pack(">hqqqq", 0, 7, -5, -2, -1))
    assert leo in list_snapshots(d)
    third = make_log(cfg, clean_shutdown=True, recovery_point=leo, exists=True)
    assert third.load_result.recovered_segments == 1
    assert third.collect_aborted_transactions(0, leo) == aborted


def test_unclean_reopen_rebuilds_the_aborted_index(make_log, tmp_path):
    cfg = LogConfig(segment_bytes=500)
    log = make_log(cfg)
    log.append_as_leader(txn(0, pid=1), 0)
    log.append_as_leader(txn(0, pid=2), 0)
    coord(log, marker("abort", pid=1))
    for i in range(4):
        log.append_as_leader(txn(0, pid=300 + i, transactional=False), 0)
    log.append_as_leader(txn(2, pid=2), 0)
    coord(log, marker("abort", pid=2))
    log.append_as_leader(txn(0, pid=3), 0)  # open at the "crash"
    expected = log.collect_aborted_transactions(0, log.log_end_offset)
    assert expected == [(1, 0), (2, 2)]
    files = {s.base_offset: s.txn_index.entries for s in log.segments}
    log.flush()
    log.close_handlers()  # no clean shutdown: no snapshot at the log end, no marker
    d = tmp_path / "topic-0"
    for name in os.listdir(d):
        if name.endswith((".txnindex", ".snapshot")):
            os.unlink(d / name)
    again = make_log(cfg, recovery_point=0)
    assert again.collect_aborted_transactions(0, again.log_end_offset) == expected
    assert {s.base_offset: s.txn_index.entries for s in again.segments} == files
    again.high_watermark = again.log_end_offset
    assert again.last_stable_offset == again.log_end_offset - 2  # pid 3 still open


def test_truncation_reopens_a_transaction(make_log):
    log = make_log()
    log.append_as_leader(txn(0), 0)  # 0-1
    coord(log, marker("abort"))      # 2
    log.append_as_leader(txn(2), 0)  # 3-4 (a new transaction, same epoch)
    coord(log, marker("commit"))     # 5
    log.high_watermark = 6
    assert log.last_stable_offset == 6
    log.truncate_to(5)
    assert log.producer_state.first_undecided_offset() == 3
    assert log.last_stable_offset == 3
    log.truncate_to(2)  # the abort marker goes too
    assert log.collect_aborted_transactions(0, 10) == []
    assert log.producer_state.first_undecided_offset() == 0


def test_transaction_rules(make_log):
    log = make_log()
    log.append_as_leader(txn(0, epoch=2), 0)
    with pytest.raises(KafkaError) as e:  # no idempotent writes inside a transaction
        log.append_as_leader(txn(2, epoch=2, transactional=False), 0)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    coord(log, marker("commit", epoch=2, coordinator_epoch=5))
    log.append_as_leader(txn(2, epoch=2), 0)
    with pytest.raises(KafkaError) as e:  # a zombie coordinator
        coord(log, marker("abort", epoch=2, coordinator_epoch=4))
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(KafkaError) as e:  # a fenced producer epoch
        coord(log, marker("abort", epoch=1, coordinator_epoch=6))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_kip890_verification_guards(make_log):
    log = make_log()
    log.producer_state.verification_enabled = True
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(txn(0), 0)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    guard = log.maybe_start_transaction_verification(7, 0, 0)
    assert guard is not None
    log.append_as_leader(txn(0), 0, verification_guard=guard)
    assert log.maybe_start_transaction_verification(7, 2, 0) is None  # open: no check
    log.append_as_leader(txn(2), 0)  # later batches need no guard
    coord(log, marker("abort"))
    with pytest.raises(KafkaError) as e:  # a stale guard never starts a new transaction
        log.append_as_leader(txn(4), 0, verification_guard=guard)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    # KIP-890's ABA case: a verification starts, the coordinator aborts that transaction
    # (its marker reaches this partition first): the verification is spent
    stale = log.maybe_start_transaction_verification(7, 4, 0)
    assert stale is not None
    coord(log, marker("abort"))
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(txn(4), 0, verification_guard=stale)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    fresh = log.maybe_start_transaction_verification(7, 4, 0)
    assert fresh is not guard
    log.append_as_leader(txn(4), 0, verification_guard=fresh)
    assert log.producer_state.verification_guard(7) is None  # cleared once appended


def test_snapshots_follow_rolls_and_retention(make_log, tmp_path):
    log = make_log(LogConfig(segment_bytes=400))
    for i in range(12):
        log.append_as_leader(txn(2 * i, pid=11, transactional=False), 0)
    d = str(tmp_path / "topic-0")
    snaps = list_snapshots(d)
    bases = [s.base_offset for s in log.segments]
    assert snaps and set(snaps) <= set(bases)
    log.flush()
    log.high_watermark = log.log_end_offset
    log.delete_records_before(bases[-2])
    log.delete_old_segments()
    assert all(o >= log.log_start_offset for o in list_snapshots(d))


# --- josef dump-log ------------------------------------------------------------------------------
def _dump(files):
    import contextlib
    import io

    from broker.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["dump-log", "--files", ",".join(map(str, files))])
    return rc, out.getvalue(), err.getvalue()


def test_dump_log_decodes_txnindex_and_snapshot_files(make_log, tmp_path):
    log = make_log()
    log.append_as_leader(txn(0, pid=1), 0)            # 0-1
    log.append_as_leader(txn(0, pid=2), 0)            # 2-3
    coord(log, marker("abort", pid=1))                # 4
    log.append_as_leader(txn(2, pid=2), 0)            # 5-6
    log.flush()
    log.close()
    d = tmp_path / "topic-0"
    rc, out, err = _dump([d / "00000000000000000000.txnindex", d / "00000000000000000007.snapshot"])
    assert rc == 0, err
    lines = out.splitlines()
    assert "version: 0 producerId: 1 firstOffset: 0 lastOffset: 4 lastStableOffset: 2" in lines
    assert ("producerId: 2 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
            "OptionalLong[2] lastTimestamp: 1001 firstSequence: 2 lastSequence: 3 "
            "lastOffset: 6 offsetDelta: 1 timestamp: 1001") in lines
    assert any(x.startswith("producerId: 1 producerEpoch: 0 coordinatorEpoch: 3 "
                            "currentTxnFirstOffset: OptionalLong.empty") for x in lines)
    snap = d / "00000000000000000007.snapshot"
    snap.write_bytes(snap.read_bytes()[:-1] + b"\x01")
    rc, out, err = _dump([snap])
    assert rc == 1 and "CRC mismatch" in err


async def test_idle_producers_expire_but_open_transactions_stay(tmp_path, clock):
    from storage.log_manager import LogManager

    def at(ts, pid, transactional):
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0,
                               is_transactional=transactional)
        b.append(ts, b"k", b"v")
        return bytearray(b.build())

    lm = LogManager([str(tmp_path / "d")], LogConfig(), time_ms=clock,
                    producer_id_expiration_ms=60_000)
    await lm.startup(background=False)
    try:
        lg = lm.get_or_create_log(("t", 0))
        lg.append_as_leader(at(clock(), 1, False), 0)
        lg.append_as_leader(at(clock(), 2, True), 0)  # an open transaction
        clock.advance(30_000)
        assert await lm.remove_expired_producers() == 0
        clock.advance(31_000)
        assert await lm.remove_expired_producers() == 1
        assert lg.producer_state.last_entry(1) is None
        assert lg.producer_state.last_entry(2) is not None  # kept while its txn is open
    finally:
        await lm.shutdown()
