"""The tail-read fast paths of Log.read / LogSegment.translate_offset give the same answers as
the index lookup + scan they skip (after appends, truncation, reopening, rolls)."""

import os

from storage.config import LogConfig

from .conftest import build_batch


def _translate_by_index(seg, offset):
    """LogSegment.translate_offset without the tail hint: index lookup, then scan."""
    _, pos = seg.offset_index.lookup(offset)
    for h in seg.iter_headers(pos):
        if h.last_offset >= offset:
            return h
    return None


def _check_every_offset(log):
    for seg in log.segments:
        for offset in range(seg.base_offset, log.log_end_offset + 2):
            assert seg.translate_offset(offset) == _translate_by_index(seg, offset), offset
    for offset in range(log.log_start_offset, log.log_end_offset + 1):
        for max_offset in (None, log.high_watermark, log.log_end_offset):
            got = log.read(offset, 1 << 20, max_offset)
            assert got.records.read_bytes() == _slow_read(log, offset, max_offset), (
                offset, max_offset)


def _slow_read(log, offset, max_offset):
    """What Log.read returns, computed from the batch headers of every segment."""
    if offset >= log.log_end_offset or (max_offset is not None and offset >= max_offset):
        return b""
    seg = [s for s in log.segments if s.base_offset <= offset][-1]
    first = _translate_by_index(seg, offset)
    if first is None:
        return b""
    end = seg.size
    if max_offset is not None:
        limit = _translate_by_index(seg, max_offset)
        if limit is not None:
            end = limit.position
    return os.pread(seg.log_file.fd, max(0, end - first.position), first.position)


def test_tail_reads_match_index_scan_across_appends_truncation_and_rolls(make_log):
    config = LogConfig(segment_bytes=3000, index_interval_bytes=150, segment_index_bytes=4096)
    log = make_log(config)
    for i in range(25):
        log.append_as_leader(build_batch(n=1 + i % 4, ts=1000 + i), leader_epoch=0)
        log.high_watermark = log.log_end_offset - (i % 3)  # HW at, and below, the LEO
        _check_every_offset(log)
    assert log.num_segments > 1
    log.truncate_to(log.log_end_offset - 5)
    log.high_watermark = log.log_end_offset
    _check_every_offset(log)
    for i in range(3):  # appends after a truncation
        log.append_as_leader(build_batch(n=2, ts=2000 + i), leader_epoch=1)
        _check_every_offset(log)
