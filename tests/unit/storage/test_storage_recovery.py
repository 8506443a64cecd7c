import os
import random

import pytest

from protocol.records import iter_batches
from storage.config import LogConfig

from .conftest import build_batch, check_indexes_against_scan

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=300, segment_index_bytes=8192)


def fill(log, n=60):
    for i in range(n):
        log.append_as_leader(build_batch(n=1 + i % 4, ts=1000 + i, value_size=30 + i % 50), 2)
    return log.log_end_offset


def crash(log):
    """Drop the process's handles without trimming/flushing, as a SIGKILL would."""
    log.close_handlers()


def batches_of(seg):
    return list(seg.iter_headers(0))


def test_unclean_reopen_without_damage_keeps_all(make_log):
    log = make_log(CFG)
    leo = fill(log)
    crash(log)
    log = make_log(CFG, clean_shutdown=False, recovery_point=0)
    assert log.log_end_offset == leo and log.load_result.truncated_bytes == 0
    assert log.load_result.recovered_segments == log.num_segments
    assert log.leader_epoch_cache.entries == [(2, 0)]
    check_indexes_against_scan(log)
    assert log.append_as_leader(build_batch(n=1), 2).first_offset == leo


def test_corrupt_byte_in_tail_truncates_from_that_batch(make_log):
    log = make_log(CFG)
    fill(log)
    seg = log.active_segment
    victim = batches_of(seg)[-3]
    crash(log)
    with open(seg.log_path, "r+b") as f:
        f.seek(victim.position + 70)
        b = f.read(1)
        f.seek(victim.position + 70)
        f.write(bytes([b[0] ^ 0x55]))
    log = make_log(CFG, clean_shutdown=False, recovery_point=0)
    assert log.log_end_offset == victim.base_offset
    assert log.active_segment.size == victim.position
    check_indexes_against_scan(log)


def test_truncated_log_file(make_log):
    log = make_log(CFG)
    fill(log)
    seg = log.active_segment
    last = batches_of(seg)[-1]
    crash(log)
    os.truncate(seg.log_path, last.position + last.size - 10)
    log = make_log(CFG, clean_shutdown=False, recovery_point=0)
    assert log.log_end_offset == last.base_offset
    check_indexes_against_scan(log)


def test_random_garbage_appended_to_tail(make_log):
    rng = random.Random(3)
    for trial in range(5):
        log = make_log(CFG, name=f"t-{trial}")
        leo = fill(log, 30)
        crash(log)
        with open(log.active_segment.log_path, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 300)))
        log = make_log(CFG, name=f"t-{trial}", clean_shutdown=False, recovery_point=0)
        assert log.log_end_offset == leo
        check_indexes_against_scan(log)


def test_corruption_in_middle_segment_drops_later_segments(make_log):
    log = make_log(CFG)
    fill(log, 80)
    assert log.num_segments >= 4
    mid = log.segments[1]
    first_batch = batches_of(mid)[0]
    crash(log)
    with open(mid.log_path, "r+b") as f:
        f.seek(first_batch.position + 65)
        f.write(b"\xff\xff\xff")
    log = make_log(CFG, clean_shutdown=False, recovery_point=0)
    assert log.num_segments == 2 and log.log_end_offset == mid.base_offset
    assert log.active_segment.size == 0
    check_indexes_against_scan(log)


@pytest.mark.parametrize("listed", [False, True], ids=["looked-up", "from-listing"])
def test_missing_and_garbage_indexes_rebuilt_on_clean_start(make_log, listed):
    log = make_log(CFG)
    fill(log, 80)
    log.flush()
    log.close()
    segs = log.segments
    os.unlink(segs[0].offset_index.path)
    os.unlink(segs[1].time_index.path)
    with open(segs[2].offset_index.path, "wb") as f:
        f.write(os.urandom(77))
    # Random entries of a valid size pass Kafka's sanity check about one time in four, so
    # make the garbage one the check must catch: the last timestamp below the first.
    garbage = bytearray(os.urandom(120))
    garbage[0:8] = (2**63 - 1).to_bytes(8, "big")
    garbage[108:116] = (0).to_bytes(8, "big")
    with open(segs[3].time_index.path, "wb") as f:
        f.write(garbage)
    expected = {s.base_offset: (s.offset_index.entries, s.time_index.entries) for s in segs[:4]}
    log = make_log(CFG, clean_shutdown=True, exists=listed)
    check_indexes_against_scan(log)
    for s in log.segments[:4]:
        assert (s.offset_index.entries, s.time_index.entries) == expected[s.base_offset]
        assert os.path.getsize(s.offset_index.path) == s.offset_index.entries * 8


def test_preallocated_active_index_after_crash(make_log):
    log = make_log(CFG)
    fill(log, 20)
    path = log.active_segment.offset_index.path
    log.active_segment.offset_index.flush()  # entries written, the log itself not flushed
    fill(log, 5)  # entries only in memory when the process dies
    crash(log)
    assert os.path.getsize(path) == 8192  # still preallocated
    log = make_log(CFG, clean_shutdown=False, recovery_point=0)
    check_indexes_against_scan(log)
    assert log.active_segment.offset_index.lookup(log.log_end_offset)[0] < log.log_end_offset


def test_only_segments_after_recovery_point_are_scanned(make_log):
    log = make_log(CFG)
    fill(log, 80)
    log.flush()
    rp = log.recovery_point
    first = log.segments[0]
    crash(log)
    # damage a flushed segment: it is below the recovery point so it is not re-read
    with open(first.log_path, "r+b") as f:
        f.seek(70)
        f.write(b"\x00")
    log = make_log(CFG, clean_shutdown=False, recovery_point=rp)
    assert log.load_result.recovered_segments == 1
    assert log.log_end_offset == rp


def test_leftover_files_removed(make_log, tmp_path):
    log = make_log(CFG)
    fill(log, 30)
    log.flush()
    log.close()
    d = tmp_path / "topic-0"
    (d / "00000000000000000000.log.deleted").write_bytes(b"x")
    (d / "00000000000000099999.index").write_bytes(b"")
    (d / "leader-epoch-checkpoint.tmp").write_bytes(b"")
    log = make_log(CFG, clean_shutdown=True)
    names = os.listdir(d)
    assert not [n for n in names if n.endswith((".deleted", ".tmp"))]
    assert not [n for n in names if n.startswith("00000000000000099999")]
    data = log.read(0, 1 << 20).records.read_bytes()
    assert next(iter_batches(data)).base_offset == 0


def test_clean_start_with_an_empty_index_for_a_big_batch_recovers_nothing(make_log):
    """Issue 26: one batch larger than index.interval.bytes leaves both indexes empty, which
    is valid; a clean restart must not take it for a lost index and recover the segment."""
    log = make_log(CFG)
    log.append_as_leader(build_batch(n=10, value_size=100), 2)
    assert log.active_segment.size > CFG.index_interval_bytes
    assert log.active_segment.offset_index.entries == 0
    log.flush()
    log.close()
    log = make_log(CFG, clean_shutdown=True)
    assert log.load_result.recovered_segments == 0
    assert log.log_end_offset == 10
