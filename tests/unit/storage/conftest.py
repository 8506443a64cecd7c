"""Fixtures for storage tests: a manual clock and a v2 batch factory (protocol.records)."""

import pytest

from protocol.record_builder import RecordBatchBuilder
from storage.config import LogConfig


class ManualClock:
    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now = now_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock():
    return ManualClock()


def build_batch(n=3, ts=1000, value_size=50, producer_id=-1, producer_epoch=-1,
                base_sequence=-1, compression_type=0, key=b"k"):
    b = RecordBatchBuilder(compression_type=compression_type, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence)
    for i in range(n):
        b.append(ts + i, key, bytes([65 + i % 26]) * value_size)
    return bytearray(b.build())


@pytest.fixture
def batch():
    return build_batch


@pytest.fixture
def small_config():
    return LogConfig(segment_bytes=4000, index_interval_bytes=200, segment_index_bytes=4096)


@pytest.fixture
def make_log(tmp_path, clock):
    """Open `Log`s under tmp_path/<name>; every one is closed at teardown, even on failure."""
    from storage.log import Log

    opened = []

    def make(config=None, name="topic-0", **kw):
        kw.setdefault("time_ms", clock)
        log = Log(str(tmp_path / name), config or LogConfig(), **kw)
        opened.append(log)
        return log

    yield make
    for log in opened:
        for seg in log.segments:
            if not seg._closed:
                seg.close_handlers()


def check_indexes_against_scan(log):
    """Every offset resolves through the indexes to the batch a linear scan finds, every
    index entry points at a batch boundary, and the time index is increasing."""
    for seg in log.segments:
        headers = list(seg.iter_headers(0))
        by_pos = {h.position: h for h in headers}
        for i in range(seg.offset_index.entries):
            off, pos = seg.offset_index.entry(i)
            assert pos in by_pos and by_pos[pos].last_offset == off
        prev = (-1, -1)
        for i in range(seg.time_index.entries):
            ts, off = seg.time_index.entry(i)
            assert ts > prev[0] and off >= prev[1]
            assert any(h.last_offset == off for h in headers)
            prev = (ts, off)
        for h in headers:
            for o in (h.base_offset, h.last_offset):
                found = seg.translate_offset(o)
                assert found is not None and found.position == h.position
        if headers:
            assert seg.read_next_offset() == headers[-1].last_offset + 1
