"""File descriptors of the log (counted in /proc/self/fd): at most one per segment (its `.log`),
active indexes in memory, non-active ones opened per lookup (Kafka's LazyIndex, KIP-263), and
everything bounded by the process-wide `DescriptorCache` (least recently used released first,
reopened on the next use); an open() failing with EMFILE releases idle descriptors and
retries."""

import errno
import os
import resource

import pytest

from protocol.record_format import BATCH_HEADER, BATCH_HEADER_SIZE, LOG_OVERHEAD
from storage.config import LogConfig
from storage.descriptor_cache import descriptor_cache
from storage.index import OffsetIndex
from storage.log_manager import LogManager
from tests.unit.storage.conftest import build_batch

CFG = LogConfig(segment_bytes=8000, index_interval_bytes=400, segment_index_bytes=4096)
TP = ("fds", 0)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def manager(tmp_path, clock) -> LogManager:
    mgr = LogManager([str(tmp_path / "data")], CFG, broker_id=1, cluster_id="c1",
                     time_ms=clock)
    mgr.load_all()
    return mgr


def fill(log, n: int) -> None:
    for i in range(n):
        log.append_as_leader(build_batch(n=2, ts=1000 + i, value_size=50), 1)


def read_all(log) -> bytes:
    """Every batch from the log start, fetched 4000 bytes at a time (whole batches kept)."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 4000).records.read_bytes()
        pos = 0
        while pos + BATCH_HEADER_SIZE <= len(data):
            fields = BATCH_HEADER.unpack_from(data, pos)
            end = pos + fields[1] + LOG_OVERHEAD
            if end > len(data):
                break
            offset = fields[0] + fields[6] + 1
            pos = end
        assert pos > 0
        out.append(data[:pos])
    return b"".join(out)


@pytest.fixture
def small_limit():
    cache = descriptor_cache()
    old = cache.capacity
    cache.capacity = 8
    yield cache
    cache.capacity = old


def test_at_most_one_descriptor_per_segment_while_appending_and_after_restart(tmp_path, clock):
    before = open_fds()
    mgr = manager(tmp_path, clock)
    log = mgr.get_or_create_log(TP)
    fill(log, 4600)
    segments = log.num_segments
    assert segments >= 100
    # indexes hold no descriptor: the active one's entries are in memory
    assert all(s.open_descriptors() <= 1 for s in log.segments)
    assert log.active_segment.open_descriptors() == 1  # the .log only
    assert open_fds() - before <= segments + 2
    data = read_all(log)
    mgr.close_all()
    assert open_fds() - before <= 1

    started = open_fds()
    mgr = manager(tmp_path, clock)
    log = mgr.get_log(TP)
    assert log.num_segments == segments
    # a clean start opens no segment file and maps no index
    assert not any(s.open_descriptors() for s in log.segments[:-1])
    assert open_fds() - started <= 2
    assert read_all(log) == data
    assert all(s.open_descriptors() <= 1 for s in log.segments[:-1])
    mgr.close_all()


def test_descriptor_cache_bounds_segments_and_indexes(tmp_path, clock, small_limit):
    mgr = manager(tmp_path, clock)
    logs = [mgr.get_or_create_log(("many", p)) for p in range(12)]
    for lg in logs:
        fill(lg, 300)
    data = [read_all(lg) for lg in logs]
    mgr.close_all()
    before = open_fds()
    mgr = manager(tmp_path, clock)
    logs = [mgr.get_log(("many", p)) for p in range(12)]
    for _ in range(2):
        assert [read_all(lg) for lg in logs] == data  # reopened on demand
        held = sum(s.open_descriptors() for lg in logs for s in lg.segments)
        assert held <= small_limit.capacity + 1
    for lg in logs:
        fill(lg, 5)  # appends to the active segments reopen them too
        assert lg.log_end_offset == 610
    held = sum(s.open_descriptors() for lg in logs for s in lg.segments)
    assert held <= small_limit.capacity + 1
    assert open_fds() - before <= small_limit.capacity + 3
    assert small_limit.released > 0
    mgr.close_all()


def test_released_segment_descriptor_stays_valid_for_a_pending_read(tmp_path, clock,
                                                                   small_limit):
    """A fetch response holds FileRecords (sent later with sendfile): the cache releasing
    the segment meanwhile must not close (and let the number be reused) under it."""
    mgr = manager(tmp_path, clock)
    log = mgr.get_or_create_log(TP)
    fill(log, 400)
    want = log.read(0, 1000).records.read_bytes()
    records = log.read(0, 1000).records
    seg = log.segments[0]
    assert seg.release() and not seg.holds_descriptor()
    others = [mgr.get_or_create_log(("other", p)) for p in range(20)]  # churn the cache
    for lg in others:
        fill(lg, 1)
    assert records.read_bytes() == want
    mgr.close_all()


def test_emfile_on_reopen_releases_idle_descriptors_and_retries(tmp_path, clock):
    mgr = manager(tmp_path, clock)
    logs = [mgr.get_or_create_log(("t", p)) for p in range(40)]
    for lg in logs:
        fill(lg, 2)
    victim = logs[0].active_segment
    victim.release()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hog = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 30, hard))
    try:
        try:
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as e:
            assert e.errno == errno.EMFILE
        failures = descriptor_cache().emergency_releases
        fill(logs[0], 1)  # reopening the .log hits EMFILE, releases idle ones, retries
        assert descriptor_cache().emergency_releases == failures + 1
        assert victim.holds_descriptor()
    finally:
        for fd in hog:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert logs[0].log_end_offset == 6
    mgr.close_all()


def test_garbage_index_of_clean_segment_rebuilt_on_first_use(tmp_path, clock):
    mgr = manager(tmp_path, clock)
    log = mgr.get_or_create_log(TP)
    fill(log, 400)
    data = read_all(log)
    victim = log.segments[1]
    expected = [victim.offset_index.entry(i) for i in range(victim.offset_index.entries)]
    assert expected
    mgr.close_all()
    with open(victim.offset_index.path, "r+b") as f:  # same length, entries not increasing
        f.write(bytes(len(expected) * 8))
    mgr = manager(tmp_path, clock)
    log = mgr.get_log(TP)
    seg = log.segments[1]
    assert read_all(log) == data
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == expected
    mgr.close_all()


def test_active_index_holds_no_descriptor_and_lazy_index_maps_on_use(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    before = open_fds()
    idx = OffsetIndex(path, 0, 8000)
    assert open_fds() == before and not os.path.exists(path)  # created on first write-out
    for i in range(10):
        idx.append(i * 10, i * 100)
    assert idx.lookup(55) == (50, 500) and open_fds() == before
    idx.flush()  # the entries reach the file, preallocated as Kafka's
    assert os.path.getsize(path) == 8000
    with open(path, "rb") as f:
        assert f.read(16) == bytes.fromhex("00000000 00000000 0000000a 00000064")
    idx.append(100, 1000)
    idx.trim_to_valid_size()
    assert os.path.getsize(path) == 88 and open_fds() == before and not idx.writable
    idx.close()
    assert open_fds() == before
    lazy = OffsetIndex(path, 0, 8000, writable=False)
    assert not lazy.is_loaded and open_fds() == before and lazy.entries == 11
    assert lazy.lookup(55) == (50, 500) and open_fds() == before
    assert lazy.lookup(95) == (90, 900) and lazy.entry(10) == (100, 1000)
    lazy.close()
    assert open_fds() == before
