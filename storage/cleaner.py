"""Log compaction: `LogCleaner` (Kafka's LogCleaner / LogCleanerManager / Cleaner).

For logs whose `cleanup.policy` includes `compact`, the cleaner keeps at least the last value
of every key (Kafka docs "Log Compaction"). One pass over one log:

1. **Choose** (on the event loop): for each compacted log not being cleaned, the *clean*
   section is [log start, first dirty offset) where the first dirty offset is the log's
   entry in the log dir's `cleaner-offset-checkpoint` (Kafka's text checkpoint format; reset
   to the log start offset when missing or outside [log start, LEO]). The *cleanable*
   section is made of the whole segments after it that end at or below the first
   uncleanable offset = min(last stable offset (<= high watermark), active segment base,
   base of the first segment holding a record newer than now - min.compaction.lag.ms).
   dirty ratio = cleanable bytes / (clean + cleanable bytes). The log with the highest ratio
   above its `min.cleanable.dirty.ratio` is cleaned; a log whose first dirty segment's first
   batch is older than now - max.compaction.lag.ms is cleaned whatever its ratio.
2. **Offset map** (executor thread): key -> last offset over the cleanable segments,
   segment by segment until the map (`log.cleaner.dedupe.buffer.size` / threads) is full;
   the cleaned range ends at the last segment that fit (the end offset).
3. **Clean** (executor thread): all segments below the end offset, in groups whose total
   size fits `segment.bytes`, whose index entries fit `segment.index.bytes` and whose offsets
   fit a 32-bit relative offset (Kafka's groupSegmentsBySize), are each rewritten into one
   `<base>.log.cleaned` (+ indexes), keeping what `storage.cleaner_batches.filter_batch`
   keeps (latest record per key, tombstones until their delete horizon, no data of aborted
   transactions, markers until their transaction is gone plus delete.retention.ms; the
   aborted transactions whose markers stay go to the cleaned segment's `.txnindex`), fsynced,
   with the last modified time of the group's last segment.
4. **Swap** (event loop): `storage.cleaner_swap.replace_segments` per group, abandoned when
   the log changed under the cleaner (truncation, retention, deletion); then the checkpoint
   advances to the end offset.

Background: `log.cleaner.threads` asyncio workers (each cleans one log at a time in the
default executor; a log is cleaned by one worker at a time), each sleeping
`log.cleaner.backoff.ms` when nothing was cleanable. `log.cleaner.enable=false` or 0 threads:
no cleaning. Not implemented: `log.cleaner.io.max.bytes.per.second` throttling.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from protocol.records import RecordBatch
from storage.checkpoints import OffsetCheckpointFile, fsync_dir
from storage.cleaner_batches import (
    CleanedTransactionMetadata,
    OffsetMap,
    OffsetMapFullError,
    add_batch_to_map,
    filter_batch,
    iter_file_batches,
)
from storage.cleaner_swap import replace_segments, segments_unchanged
from storage.log import Log
from storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)
from storage.transaction_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
INT32_MAX = 0x7FFFFFFF
TopicPartition = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class CleanerConfig:
    """Broker-level cleaner settings (Kafka's `log.cleaner.*` keys and defaults)."""

    enable: bool = True  # log.cleaner.enable
    num_threads: int = 1  # log.cleaner.threads
    dedupe_buffer_size: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size (bytes)
    io_buffer_size: int = 512 * 1024  # log.cleaner.io.buffer.size (bytes)
    io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    max_io_bytes_per_second: float = float("inf")  # log.cleaner.io.max.bytes.per.second

    @classmethod
    def from_kafka_config(cls, get: Callable[[str], Any]) -> CleanerConfig:
        """From a `KafkaConfig.get`-like lookup of the `log.cleaner.*` keys."""
        return cls(enable=bool(get("log.cleaner.enable")),
                   num_threads=int(get("log.cleaner.threads")),
                   dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size")),
                   io_buffer_size=int(get("log.cleaner.io.buffer.size")),
                   io_buffer_load_factor=float(get("log.cleaner.io.buffer.load.factor")),
                   backoff_ms=int(get("log.cleaner.backoff.ms")),
                   max_io_bytes_per_second=float(get("log.cleaner.io.max.bytes.per.second")))


class CleanerAbortedError(Exception):
    """The cleaner is shutting down: the pass stops, its `.cleaned` files are removed."""


class UncleanableLogError(Exception):
    """A log the cleaner cannot make progress on (e.g. one segment holds more keys than the
    dedupe buffer); it is skipped until restart (Kafka's uncleanable partitions)."""


@dataclasses.dataclass
class LogToClean:
    """A candidate: offsets and sizes as defined in the module docstring (bytes)."""

    tp: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    segments: list[tuple[LogSegment, int, int]]  # (segment, its end offset, size) to clean
    aborted: list = dataclasses.field(default_factory=list)  # AbortedTxn in [start, end)

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def log_to_clean(tp: TopicPartition, lg: Log, checkpoint: int | None, now_ms: int
                 ) -> LogToClean:
    """Measure `lg` (on the loop thread) as step 1 of the module docstring."""
    cfg = lg.config
    first_dirty = checkpoint if checkpoint is not None and \
        lg.log_start_offset <= checkpoint <= lg.log_end_offset else lg.log_start_offset
    segs = list(lg.segments)
    uncleanable = min(lg.last_stable_offset, segs[-1].base_offset)
    whole = []  # non-active segments wholly below the first uncleanable offset
    for i, seg in enumerate(segs[:-1]):
        end = segs[i + 1].base_offset
        if end > uncleanable:
            break
        if cfg.min_compaction_lag_ms > 0 and end > first_dirty and \
                seg.largest_timestamp() > now_ms - cfg.min_compaction_lag_ms:
            uncleanable = seg.base_offset
            break
        whole.append((seg, end, seg.size))
    clean_bytes = sum(n for _, end, n in whole if end <= first_dirty)
    dirty = [(s, end) for s, end, _ in whole if end > first_dirty]
    cleanable_bytes = sum(s.size for s, _ in dirty)
    now = False
    if dirty and cfg.max_compaction_lag_ms < (1 << 63) - 1:
        first_ts = dirty[0][0].rolling_based_timestamp
        now = first_ts is not None and 0 <= first_ts < now_ms - cfg.max_compaction_lag_ms
    aborted = lg.aborted_transactions_in(whole[0][0].base_offset, whole[-1][1]) if whole else []
    return LogToClean(tp, lg, first_dirty, uncleanable, clean_bytes, cleanable_bytes, now,
                      whole, aborted)


@dataclasses.dataclass
class CleanedGroup:
    new: LogSegment
    old: list[LogSegment]
    old_sizes: list[int]


@dataclasses.dataclass
class CleanResult:
    end_offset: int
    groups: list[CleanedGroup]
    keys: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


class Cleaner:
    """The blocking part of a pass (steps 2 and 3): run it in an executor thread. Reads the
    segments' files by position only; never touches the `Log`'s segment list."""

    def __init__(self, config: CleanerConfig, stopping: threading.Event):
        self.config = config
        self.stopping = stopping
        per_thread = config.dedupe_buffer_size // max(config.num_threads, 1)
        self.offset_map = OffsetMap.for_buffer(per_thread, config.io_buffer_load_factor)

    def _check(self) -> None:
        if self.stopping.is_set():
            raise CleanerAbortedError("cleaner shutting down")

    def build_offset_map(self, ltc: LogToClean) -> int:
        """Fill the map from the cleanable segments; returns the end offset (exclusive)."""
        m = self.offset_map
        m.clear()
        end_offset = ltc.first_dirty_offset
        # aborted transactions whose marker is in the dirty section (Kafka collects them
        # from the first dirty offset): their batches never enter the map
        txns = CleanedTransactionMetadata(
            [t for t in ltc.aborted if t.last_offset >= ltc.first_dirty_offset])
        for seg, end, size in ltc.segments:
            if end <= ltc.first_dirty_offset:
                continue
            try:
                handle = seg.log_file  # held for the scan (the descriptor cache may drop it)
                for _, batch in iter_file_batches(handle.fd, 0, size, self.config.io_buffer_size):
                    if batch.last_offset >= ltc.first_dirty_offset and not txns.on(batch):
                        add_batch_to_map(batch, m, ltc.first_dirty_offset)
                    self._check()
            except OffsetMapFullError:
                if end_offset == ltc.first_dirty_offset:
                    raise UncleanableLogError(
                        f"{seg} holds more keys than log.cleaner.dedupe.buffer.size allows "
                        f"({m.capacity})") from None
                break
            end_offset = end
        return end_offset

    def group_segments(self, ltc: LogToClean, end_offset: int) -> list[list]:
        """Kafka's groupSegmentsBySize over the segments below `end_offset`."""
        cfg = ltc.log.config
        max_index_entries = cfg.segment_index_bytes // 12  # both indexes must fit
        groups: list[list] = []
        for item in ltc.segments:
            seg, end, size = item
            if end > end_offset:
                break
            if groups:
                g = groups[-1]
                entries = sum(s.offset_index.entries + s.time_index.entries + 2 for s, _, _ in g)
                if sum(n for _, _, n in g) + size <= cfg.segment_bytes and \
                        entries + seg.offset_index.entries + seg.time_index.entries + 2 \
                        <= max_index_entries and end - 1 - g[0][0].base_offset <= INT32_MAX:
                    g.append(item)
                    continue
            groups.append([item])
        return groups

    def clean(self, ltc: LogToClean, now_ms: int,
              producer_last_offsets: dict[int, tuple[int, int]]) -> CleanResult:
        """Steps 2 and 3. `producer_last_offsets`: pid -> (last data offset or -1, epoch).
        Raises UncleanableLogError, CleanerAbortedError, OSError."""
        end_offset = self.build_offset_map(ltc)
        result = CleanResult(end_offset, [], keys=self.offset_map.size)
        txns = CleanedTransactionMetadata(ltc.aborted)
        try:
            for group in self.group_segments(ltc, end_offset):
                new = self._clean_group(ltc.log, group, now_ms, producer_last_offsets, result,
                                        txns)
                result.groups.append(CleanedGroup(new, [s for s, _, _ in group],
                                                  [n for _, _, n in group]))
        except BaseException:
            for g in result.groups:
                g.new.delete_files()
            raise
        return result

    def _clean_group(self, lg: Log, group: list, now_ms: int,
                     last_offsets: dict[int, tuple[int, int]], result: CleanResult,
                     txns: CleanedTransactionMetadata) -> LogSegment:
        cfg = lg.config
        base = group[0][0].base_offset
        prefix = os.path.join(lg.dir, filename_prefix(base))
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(prefix + suffix + CLEANED_SUFFIX)  # a stale earlier attempt
        new = LogSegment(lg.dir, base, index_interval_bytes=cfg.index_interval_bytes,
                         max_index_size=cfg.segment_index_bytes, time_ms=lg.time_ms,
                         active=True, file_suffix=CLEANED_SUFFIX)
        txns.cleaned_index = new.txn_index  # kept ABORT markers re-enter the index
        try:
            pending, meta = bytearray(), []
            for seg, _, size in group:
                result.bytes_read += size
                handle = seg.log_file  # held for the scan (the descriptor cache may drop it)
                for _, batch in iter_file_batches(handle.fd, 0, size, self.config.io_buffer_size):
                    discard = txns.on(batch)
                    out = filter_batch(batch, self.offset_map, now_ms, cfg.delete_retention_ms,
                                       _is_last_of_producer(batch, last_offsets), discard)
                    if out is None:
                        continue
                    kept = batch if isinstance(out, memoryview) else _header_of(out)
                    pending += out
                    meta.append((kept.last_offset, kept.max_timestamp, len(out)))
                    if len(pending) >= self.config.io_buffer_size:
                        self._write(new, pending, meta)
                        pending, meta = bytearray(), []
                    self._check()
            if pending:
                self._write(new, pending, meta)
            new.on_become_inactive()
            new.flush()
            modified = max(s.last_modified_ms for s, _, _ in group)
            os.utime(new.log_path, ns=(modified * 1_000_000, modified * 1_000_000))
            new.last_modified_ms = modified
            result.bytes_written += new.size
            return new
        except BaseException:
            new.delete_files()
            raise

    @staticmethod
    def _write(seg: LogSegment, data: bytearray, meta: list) -> None:
        need = len(meta) + 2
        for idx, width in ((seg.offset_index, 8), (seg.time_index, 12)):
            if idx.entries + need >= idx.max_entries:
                idx.resize((idx.max_entries + need) * width + width * 1024)
        seg.append(data, meta)


def _is_last_of_producer(batch: RecordBatch, last: dict[int, tuple[int, int]]) -> bool:
    """Kafka's isBatchLastRecordOfProducer: a live producer's last data batch (its sequence
    numbers), or - when it has none - its marker at its current epoch (for fencing)."""
    if batch.producer_id < 0:
        return False
    found = last.get(batch.producer_id)
    if found is None:
        return False
    last_data, epoch = found
    if last_data >= 0:
        return batch.last_offset == last_data
    return batch.is_control and batch.producer_epoch == epoch


def _header_of(data: bytes) -> RecordBatch:
    return RecordBatch(data)


class CleanerHost(Protocol):
    """What the cleaner uses of the `storage.log_manager.LogManager` that runs it (the manager
    passes itself): the logs (`all_logs`, `get_log`), where they live (`log_dir_of` by
    partition, `dir_of` by log, `live_log_dirs`: the dirs not failed, KIP-112), the clock
    (`time_ms`, ms) and `io_error`, which takes a log dir offline for an OSError and returns
    the KAFKA_STORAGE_ERROR."""

    time_ms: Callable[[], int]

    @property
    def live_log_dirs(self) -> list[str]: ...

    def all_logs(self) -> dict[TopicPartition, Log]: ...

    logs_version: int  # a fresh stamp after every change to the set of logs

    def get_log(self, tp: TopicPartition) -> Log | None: ...

    def log_dir_of(self, tp: TopicPartition) -> str | None: ...

    def dir_of(self, log: Log) -> str: ...

    def io_error(self, log_dir: str | None, what: str, exc: BaseException) -> Any: ...


class LogCleaner:
    """Runs the passes for a `LogManager` (see the module docstring). Loop-thread object:
    `startup()`/`shutdown()` from the broker's loop; `clean_once()` runs one pass (tests)."""

    def __init__(self, manager: CleanerHost, config: CleanerConfig,
                 time_ms: Callable[[], int] | None = None):
        self.manager = manager
        self.config = config
        self.time_ms = time_ms or manager.time_ms
        self.stopping = threading.Event()
        self.checkpoints: dict[str, dict[TopicPartition, int]] = {}
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()
        self._tasks: list[asyncio.Task] = []
        self._running: set[asyncio.Future] = set()
        self._checkpoint_lock = threading.Lock()
        self.passes = 0  # completed passes (swapped at least one group)
        self._compacted: list[tuple[TopicPartition, Log]] = []
        self._compacted_key: tuple[int, int] | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def load_checkpoints(self) -> None:
        """Read `cleaner-offset-checkpoint` of every live log dir (blocking)."""
        for d in self.manager.live_log_dirs:
            self.checkpoints[d] = OffsetCheckpointFile(os.path.join(d, CLEANER_CHECKPOINT)).read()

    async def startup(self, workers: bool = True) -> None:
        """Load the checkpoints (executor); with `workers`, start `log.cleaner.threads`
        background workers when `log.cleaner.enable`."""
        await asyncio.get_running_loop().run_in_executor(None, self.load_checkpoints)
        if workers and self.config.enable:
            for i in range(self.config.num_threads):
                self._tasks.append(asyncio.create_task(self._work(), name=f"log-cleaner-{i}"))

    def resize(self, num_threads: int) -> None:
        """``log.cleaner.threads`` changed (KIP-226): start or cancel workers (a cancelled
        worker's pass in an executor thread finishes its batch)."""
        self.config = dataclasses.replace(self.config, num_threads=num_threads)
        if not self.config.enable or self.stopping.is_set():
            return
        self._tasks = [t for t in self._tasks if not t.done()]
        while len(self._tasks) < num_threads:
            self._tasks.append(asyncio.create_task(self._work(),
                                                   name=f"log-cleaner-{len(self._tasks)}"))
        for t in self._tasks[num_threads:]:
            t.cancel()
        del self._tasks[num_threads:]

    async def shutdown(self) -> None:
        """Stop the workers; a pass in an executor thread stops at its next batch."""
        self.stopping.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    def forget(self, tp: TopicPartition) -> None:
        """The partition was deleted: drop its checkpoint entry (written on the next pass)."""
        for entries in self.checkpoints.values():
            entries.pop(tuple(tp), None)

    async def _work(self) -> None:
        while True:
            try:
                cleaned = await self.clean_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed")
                cleaned = False
            if not cleaned:
                await asyncio.sleep(self.config.backoff_ms / 1000)

    # --- choosing -----------------------------------------------------------------------------
    def checkpoint_of(self, tp: TopicPartition) -> int | None:
        d = self.manager.log_dir_of(tp)
        return self.checkpoints.get(d, {}).get(tp) if d is not None else None

    def _compacted_logs(self) -> list[tuple[TopicPartition, Log]]:
        """The logs whose cleanup.policy includes compact, listed again only after the set
        of logs or a log's config changed (an idle broker of 30,000 partitions looked at
        every one of them on each pass, issue 22)."""
        key = (self.manager.logs_version, Log.config_changes())
        if self._compacted_key != key:
            self._compacted = [(tp, lg) for tp, lg in self.manager.all_logs().items()
                               if lg.config.compact]
            self._compacted_key = key
        return self._compacted

    def grab_filthiest(self, now_ms: int) -> LogToClean | None:
        """The compacted log to clean now, or None (Kafka's grabFilthiestCompactedLog)."""
        best = None
        for tp, lg in self._compacted_logs():
            if tp in self.in_progress or tp in self.uncleanable:
                continue
            ltc = log_to_clean(tp, lg, self.checkpoint_of(tp), now_ms)
            if ltc.cleanable_bytes <= 0:
                continue
            if not (ltc.needs_compaction_now
                    or ltc.cleanable_ratio > lg.config.min_cleanable_dirty_ratio):
                continue
            key = (ltc.needs_compaction_now, ltc.cleanable_ratio)
            if best is None or key > (best.needs_compaction_now, best.cleanable_ratio):
                best = ltc
        return best

    # --- one pass -----------------------------------------------------------------------------
    async def clean_once(self) -> bool:
        """Clean the filthiest log; True if segments were replaced."""
        now = self.time_ms()
        ltc = self.grab_filthiest(now)
        if ltc is None:
            return False
        tp, lg = ltc.tp, ltc.log
        self.in_progress.add(tp)
        try:
            last_offsets = {pid: (e.last_offset, e.producer_epoch)
                            for pid, e in lg.producer_state.producers.items()}
            cleaner = Cleaner(self.config, self.stopping)
            fut = asyncio.get_running_loop().run_in_executor(None, cleaner.clean, ltc, now,
                                                             last_offsets)
            self._running.add(fut)
            fut.add_done_callback(self._running.discard)
            try:
                result = await asyncio.shield(fut)
            except UncleanableLogError as e:
                log.warning("marking %s-%s uncleanable: %s", tp[0], tp[1], e)
                self.uncleanable.add(tp)
                return False
            except CleanerAbortedError:
                return False
            return await self._swap(ltc, result)
        except OSError as e:  # the log dir goes offline (Kafka's cleaner does the same)
            self.manager.io_error(self.manager.dir_of(lg), f"cleaning {tp[0]}-{tp[1]}", e)
            return False
        finally:
            self.in_progress.discard(tp)

    async def _swap(self, ltc: LogToClean, result: CleanResult) -> bool:
        lg = ltc.log
        # every segment the offset map and the groups were built from must be unchanged:
        # a record was dropped because a later one exists, which must still be there
        alive = self.manager.get_log(ltc.tp) is lg and not self.stopping.is_set() and \
            segments_unchanged(lg, [s for s, _, _ in ltc.segments],
                               [n for _, _, n in ltc.segments])
        swapped, leftovers = 0, []
        for g in result.groups:
            if alive and replace_segments(lg, g.new, g.old, g.old_sizes):
                swapped += 1
            else:
                alive = False
                leftovers.append(g.new)
        loop = asyncio.get_running_loop()
        for seg in leftovers:
            await loop.run_in_executor(None, seg.delete_files)
        if swapped:
            await loop.run_in_executor(None, fsync_dir, lg.dir)
        if not alive:
            return swapped > 0
        d = self.manager.log_dir_of(ltc.tp)
        if d is not None:
            self.checkpoints.setdefault(d, {})[ltc.tp] = result.end_offset
            await loop.run_in_executor(None, self.write_checkpoint, d)
        self.passes += 1
        log.info("cleaned %s-%s up to offset %d: %d keys, %d -> %d bytes", ltc.tp[0], ltc.tp[1],
                 result.end_offset, result.keys, result.bytes_read, result.bytes_written)
        return True

    def write_checkpoint(self, d: str) -> None:
        """Rewrite `<d>/cleaner-offset-checkpoint` with the entries of logs still there."""
        with self._checkpoint_lock:
            live = {tp for tp in self.manager.all_logs() if self.manager.log_dir_of(tp) == d}
            entries = {tp: o for tp, o in self.checkpoints.get(d, {}).items() if tp in live}
            OffsetCheckpointFile(os.path.join(d, CLEANER_CHECKPOINT)).write(entries)
