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
Producer state: the newest `.snapshot` at or below the first segment to recover (or the log
end after a clean shutdown, which leaves one there) is loaded and only the batch headers
after it are replayed, so a restart does not rescan the log (Kafka's LogLoader /
rebuildProducerState); recovered segments feed it as they are scanned and rebuild their
`.txnindex`. Snapshots beyond the recovered log end are deleted; a fresh one is taken at the
log end when anything was replayed or recovered. Leader epochs come from recovered batches
and the `leader-epoch-checkpoint`.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Container
from typing import NamedTuple, Protocol

from protocol.records import RecordBatch
from storage.cleaner_swap import SegmentOwner, complete_interrupted_swaps
from storage.config import LogConfig
from storage.epoch_cache import LeaderEpochFileCache
from storage.index import CorruptIndexError
from storage.producer_state import CompletedTxn, ProducerStateManager
from storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

__all__ = ["LoadResult", "LoadingLog", "load_segments", "rebuild_txn_index",
           "record_completed_txn", "replay_producer_state"]

_MIN_RECOVERY_BATCH = 64 * 1024 * 1024
log_ = logging.getLogger(__name__)


class LoadingLog(SegmentOwner, Protocol):
    """What loading uses of the `storage.log.Log` it fills (the log passes itself; this
    module never imports it): its partition directory `dir`, `config` (segment and index
    sizes), `leader_epoch_cache`, `producer_state`, and `_new_segment(base_offset, active)`
    (opens `<base>.log` and its indexes) besides the segment list edits of `SegmentOwner`."""

    dir: str
    config: LogConfig
    leader_epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager

    def _new_segment(self, base_offset: int, active: bool = True,
                     files: Container[str] | None = None) -> LogSegment: ...


class LoadResult(NamedTuple):  # kept by every Log (`load_result`): a tuple, not an object
    recovery_point: int
    log_start_offset: int
    truncated_bytes: int
    recovered_segments: int


_LEFTOVER_SUFFIXES = (".tmp", DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _cleanup_dir(dir_path: str, names: list[str] | None = None) -> tuple[list[int], set[str]]:
    """Step 1 of the module doc. Returns the segments' base offsets (ascending) and the names
    left in the directory."""
    if names is None:
        names = os.listdir(dir_path)
    if [n for n in names if n.endswith(SWAP_SUFFIX)] and \
            complete_interrupted_swaps(dir_path, names):
        names = os.listdir(dir_path)
    left = set(names)
    logs = set()
    for name in names:
        if name.endswith(_LEFTOVER_SUFFIXES):
            os.unlink(os.path.join(dir_path, name))
            left.discard(name)
        elif name.endswith(LOG_SUFFIX):
            stem = name[:-len(LOG_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                logs.add(int(stem))
    for name in names:
        if name.endswith(_INDEX_SUFFIXES) and name in left:
            stem = name[:name.rindex(".")]
            if stem.isdigit() and int(stem) not in logs:
                os.unlink(os.path.join(dir_path, name))
                left.discard(name)
    return sorted(logs), left


def load_segments(log: LoadingLog, recovery_point: int, log_start_offset: int,
                  clean_shutdown: bool, names: list[str] | None = None) -> LoadResult:
    bases, files = _cleanup_dir(log.dir, names)
    last = len(bases) - 1
    for i, base in enumerate(bases):
        log._add_segment(log._new_segment(base, active=(i == last), files=files))
    max_batch = max(log.config.max_message_bytes + 12, _MIN_RECOVERY_BATCH)
    truncated = 0
    recovered = 0
    producer_state = log.producer_state
    epochs = log.leader_epoch_cache

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
            seg.sanity_check(files)
            seg.load_time_state()
        except CorruptIndexError as e:
            log_.warning("recovering %s: %s", seg.log_path, e)
            seg.recover(max_batch, None)
            rebuild_txn_index(log, seg)
            recovered += 1
    # producer state: the newest snapshot not beyond the first segment to recover (or the
    # log end), then the trusted batch headers after it; recovered segments feed it below
    if first_unflushed < len(segs):
        state_end = segs[first_unflushed].base_offset
    else:
        state_end = segs[-1].read_next_offset() if segs else 0
    start = max(log_start_offset, segs[0].base_offset) if segs else 0
    snap = producer_state.load_snapshot(state_end, min_offset=start)
    replay_producer_state(log, producer_state, snap if snap is not None else start, state_end)

    for i in range(first_unflushed, len(segs)):
        seg = segs[i]
        truncated += seg.recover(max_batch, _state_feeder(producer_state, epochs, seg))
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
    producer_state.delete_snapshots_after(leo)
    start = min(max(log_start_offset, log.segments[0].base_offset), leo)
    if not clean_shutdown:
        rp = min(recovery_point, leo)
        rp = leo if first_unflushed < len(segs) or not segs else rp
    else:
        rp = leo
    if recovered or (snap != leo and leo > start):
        producer_state.take_snapshot(leo)  # the next load replays nothing
    return LoadResult(rp, start, truncated, recovered)


def _state_feeder(producer_state: ProducerStateManager, epochs, seg):
    """`on_batch` for a segment being recovered: producer state, leader epochs and the
    segment's `.txnindex` (reset by `recover`) follow every valid batch."""
    def on_batch(batch: RecordBatch) -> None:
        completed = producer_state.update(batch)
        if completed is not None:
            record_completed_txn(producer_state, seg, completed)
        if epochs is not None and batch.partition_leader_epoch >= 0:
            epochs.assign(batch.partition_leader_epoch, batch.base_offset)
    return on_batch


def record_completed_txn(producer_state: ProducerStateManager, seg,
                         completed: CompletedTxn, write_index: bool = True) -> None:
    """A marker completed a transaction: an ABORT goes to the marker segment's `.txnindex`
    (with the LSO right after it), then the transaction leaves the open set."""
    if completed.is_aborted and write_index and seg is not None:
        lso = producer_state.last_stable_offset_after(completed)
        if (seg.txn_index.last_offset or -1) < completed.last_offset:
            seg.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                            completed.last_offset, lso))
    producer_state.complete_txn(completed)


def replay_producer_state(log: LoadingLog, producer_state: ProducerStateManager,
                          from_offset: int, to_offset: int) -> int:
    """Feed `producer_state` the batches in [from_offset, to_offset) from trusted segments
    (headers only; markers are read whole for their type and coordinator epoch). Completed
    transactions are not indexed again (their `.txnindex` entries exist). Returns the
    number of batches replayed."""
    n = 0
    if from_offset >= to_offset:
        return 0
    segs = log.segments
    i = max(bisect.bisect_right([s.base_offset for s in segs], from_offset) - 1, 0)
    for seg in segs[i:]:
        if seg.base_offset >= to_offset:
            break
        h0 = seg.translate_offset(from_offset) if seg.base_offset < from_offset else None
        pos = h0.position if h0 is not None else 0
        if seg.base_offset < from_offset and h0 is None:
            continue
        for h in seg.iter_headers(pos):
            if h.base_offset >= to_offset:
                break
            if h.producer_id < 0 or h.last_offset < from_offset:
                continue
            batch = RecordBatch(seg.read_at(h.position, h.size)) if h.is_control else h
            completed = producer_state.update(batch)
            if completed is not None:
                producer_state.complete_txn(completed)
            n += 1
    return n


def rebuild_txn_index(log: LoadingLog, seg) -> None:
    """Rebuild one segment's `.txnindex` after it was recovered outside the ordered replay
    (its indexes were corrupt on a clean start): the producer state as of the segment's base
    offset (snapshot + replay, in a scratch manager that deletes nothing) then the segment."""
    scratch = ProducerStateManager(None)
    scratch.snapshot_offsets = list(log.producer_state.snapshot_offsets)
    scratch.dir = log.dir
    first = log.segments[0].base_offset
    snap = scratch.load_snapshot(seg.base_offset, first, readonly=True)
    replay_producer_state(log, scratch, snap if snap is not None else first, seg.base_offset)
    seg.txn_index.reset()
    feed = _state_feeder(scratch, None, seg)
    for h in seg.iter_headers(0):
        if h.producer_id >= 0:
            feed(RecordBatch(seg.read_at(h.position, h.size)) if h.is_control else h)
