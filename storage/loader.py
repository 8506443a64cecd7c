"""Loading a partition directory and recovering it after a crash (Kafka's LogLoader).

Steps:
1. Complete an interrupted cleaner swap (`*.swap` files: storage.cleaner_swap), then remove
   leftovers of interrupted operations: `*.tmp`, `*.deleted`, `*.cleaned` files, and index
   files without a `.log`.
2. Open every `<20-digit>.log` as a segment (missing index files are created empty).
3. Clean shutdown: trust the indexes after a sanity check; a segment failing it is
   recovered (its indexes rebuilt from the `.log`).
   Unclean shutdown: every segment from the one holding the recovery point onwards is
   recovered: batches re-read and CRC-checked, indexes rebuilt, and at the first torn or
   corrupt batch the segment is truncated and all later segments deleted.
4. The last segment becomes active (indexes preallocated); an empty log gets a segment at
   the log start offset.
Producer state and leader epochs are rebuilt from batch headers (recovered segments feed
them as they are scanned).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from protocol.records import RecordBatch
from storage.cleaner_swap import complete_interrupted_swaps
from storage.index import CorruptIndexError
from storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
)

if TYPE_CHECKING:
    from storage.log import Log

_MIN_RECOVERY_BATCH = 64 * 1024 * 1024


@dataclasses.dataclass
class LoadResult:
    recovery_point: int
    log_start_offset: int
    truncated_bytes: int
    recovered_segments: int


def _cleanup_dir(dir_path: str) -> list[int]:
    complete_interrupted_swaps(dir_path)
    names = os.listdir(dir_path)
    logs = set()
    for name in names:
        path = os.path.join(dir_path, name)
        if name.endswith((".tmp", DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)):
            os.unlink(path)
            continue
        stem, ext = os.path.splitext(name)
        if ext == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
            logs.add(int(stem))
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem.isdigit() and int(stem) not in logs:
            os.unlink(os.path.join(dir_path, name))
    return sorted(logs)


def load_segments(log: Log, recovery_point: int, log_start_offset: int,
                  clean_shutdown: bool) -> LoadResult:
    bases = _cleanup_dir(log.dir)
    for i, base in enumerate(bases):
        log._add_segment(log._new_segment(base, active=(i == len(bases) - 1)))
    max_batch = max(log.config.max_message_bytes + 12, _MIN_RECOVERY_BATCH)
    truncated = 0
    recovered = 0
    producer_state = log.producer_state
    epochs = log.leader_epoch_cache

    def on_batch(batch: RecordBatch) -> None:
        producer_state.update(batch)
        if batch.partition_leader_epoch >= 0:
            epochs.assign(batch.partition_leader_epoch, batch.base_offset)

    segs = list(log.segments)
    first_unflushed = len(segs)
    if not clean_shutdown:
        for i in range(len(segs)):
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if nxt is None or nxt > recovery_point:
                first_unflushed = i
                break
    for i, seg in enumerate(segs):
        if i >= first_unflushed:
            break
        try:
            seg.sanity_check()
            seg.load_time_state()
            _replay_headers(seg, producer_state)
        except CorruptIndexError:
            seg.recover(max_batch, on_batch)
            recovered += 1
    for i in range(first_unflushed, len(segs)):
        seg = segs[i]
        truncated += seg.recover(max_batch, on_batch)
        recovered += 1
        if truncated:
            doomed = segs[i + 1:]
            for d in doomed:
                truncated += d.size
                d.delete_files()
            log._remove_segments(doomed)
            break
    for seg in log.segments[:-1]:
        seg.offset_index.trim_to_valid_size()
        seg.time_index.trim_to_valid_size()
    if not log.segments:
        log._add_segment(log._new_segment(max(log_start_offset, 0)))
    active = log.active_segment
    active.offset_index.resize(log.config.segment_index_bytes)
    active.time_index.resize(log.config.segment_index_bytes)
    leo = active.read_next_offset()
    start = min(max(log_start_offset, log.segments[0].base_offset), leo)
    if not clean_shutdown:
        rp = min(recovery_point, leo)
        rp = leo if first_unflushed < len(segs) or not segs else rp
    else:
        rp = leo
    return LoadResult(rp, start, truncated, recovered)


def _replay_headers(seg, producer_state) -> None:
    """Feed producer state from a trusted segment's batch headers (control batches are read
    whole for their coordinator epoch)."""
    for h in seg.iter_headers(0):
        if h.producer_id < 0:
            continue
        if h.is_control:
            producer_state.update(RecordBatch(os.pread(seg.fd, h.size, h.position)))
        else:
            producer_state.update(h)
