"""File descriptors per segment (counted in /proc/self/fd): one `.log` descriptor per segment;
index files are closed once mapped, non-active indexes are mapped lazily (Kafka's LazyIndex,
KIP-263) and bounded by `MappedIndexLimit`."""

import os

import pytest

from protocol.records import BATCH_HEADER, BATCH_HEADER_SIZE, LOG_OVERHEAD
from storage.config import LogConfig
from storage.index import OffsetIndex, mapped_index_limit
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
    limit = mapped_index_limit()
    old = limit.limit
    limit.limit = 8
    yield limit
    limit.limit = old


def test_one_descriptor_per_segment_while_appending_and_after_restart(tmp_path, clock):
    before = open_fds()
    mgr = manager(tmp_path, clock)
    log = mgr.get_or_create_log(TP)
    fill(log, 4600)
    segments = log.num_segments
    assert segments >= 100
    inactive = log.segments[:-1]
    # rolled segments: their indexes were trimmed and unmapped on roll
    assert all(s.open_descriptors() == 1 for s in inactive)
    assert log.active_segment.open_descriptors() == 3  # .log + two mapped indexes
    assert open_fds() - before <= segments + 2 + 3
    data = read_all(log)
    mgr.close_all()
    assert open_fds() - before <= 1

    started = open_fds()
    mgr = manager(tmp_path, clock)
    log = mgr.get_log(TP)
    assert log.num_segments == segments
    # a clean start maps no index of a non-active segment
    assert not any(s.offset_index.is_loaded or s.time_index.is_loaded
                   for s in log.segments[:-1])
    assert open_fds() - started <= segments + 2 + 3
    assert read_all(log) == data
    mgr.close_all()


def test_mapped_index_limit_bounds_descriptors_of_read_segments(tmp_path, clock, small_limit):
    mgr = manager(tmp_path, clock)
    log = mgr.get_or_create_log(TP)
    fill(log, 1500)
    data = read_all(log)
    mgr.close_all()
    before = open_fds()
    mgr = manager(tmp_path, clock)
    log = mgr.get_log(TP)
    segments = log.num_segments
    assert read_all(log) == data  # maps every index once
    mapped = sum(s.offset_index.is_loaded + s.time_index.is_loaded for s in log.segments[:-1])
    assert mapped <= small_limit.limit
    assert open_fds() - before <= segments + small_limit.limit + 2 + 3
    assert small_limit.released > 0
    # a released index maps again on its next use and still answers the same
    first = log.segments[0]
    assert first.offset_index.lookup(first.base_offset + 50) == \
        OffsetIndex(first.offset_index.path, first.base_offset, 0, writable=False).lookup(
            first.base_offset + 50)
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
    assert not seg.offset_index.is_loaded
    assert read_all(log) == data
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == expected
    mgr.close_all()


def test_index_file_closed_once_mapped(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    before = open_fds()
    idx = OffsetIndex(path, 0, 8000)
    assert idx.is_loaded and open_fds() - before == 1  # only the mmap's own descriptor
    for i in range(10):
        idx.append(i * 10, i * 100)
    idx.trim_to_valid_size()
    assert os.path.getsize(path) == 80 and open_fds() - before == 1
    idx.close()
    assert open_fds() == before
    lazy = OffsetIndex(path, 0, 8000, writable=False)
    assert not lazy.is_loaded and open_fds() == before and lazy.entries == 10
    assert lazy.lookup(55) == (50, 500) and open_fds() - before == 1
    assert lazy.release() and open_fds() == before
    assert lazy.lookup(95) == (90, 900)
    lazy.close()
    assert open_fds() == before
