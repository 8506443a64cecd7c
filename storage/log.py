"""`Log`: one partition's segmented log (Kafka's UnifiedLog + LocalLog, minus compaction).

Directory `<topic>-<partition>/` holds the segments (see storage.segment), the
`leader-epoch-checkpoint` and producer state snapshots `<offset>.snapshot`
(storage.producer_snapshot: one per roll and one at the log end on close, so loading replays
only what follows the newest). Transactions (KIP-98): markers complete a producer's open
transaction; aborted ones go to the marker segment's `.txnindex`
(storage.transaction_index); `last_stable_offset` = min(HW, first open/unreplicated
transaction). Offsets: `log_start_offset` (first readable), `log_end_offset`
(LEO, next offset to assign), `high_watermark` (set by the ReplicaManager), `recovery_point`
(everything below is known flushed; a crash only re-scans from here).

Who calls what: the broker's partition code (one asyncio loop thread) calls append/read/
truncate/retention; `flush()` may run in an executor thread (it only fsyncs and advances the
recovery point). Loading (the constructor) does blocking I/O: run it in an executor.
Errors: `protocol.errors.KafkaError` with Kafka's codes, documented per method.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Container

from protocol.errors import ErrorCode, KafkaError, RecordValidationError
from protocol.record_format import LOG_APPEND_TIME, CorruptRecordError
from protocol.records import RecordBatch, iter_batches
from storage.checkpoints import LEADER_EPOCH_CHECKPOINT
from storage.config import LogConfig
from storage.epoch_cache import LeaderEpochFileCache
from storage.index import CorruptIndexError
from storage.loader import load_segments, record_completed_txn
from storage.log_transactions import CHANGE_STAMPS, LogTransactions
from storage.producer_state import ProducerStateManager, VerificationGuard
from storage.recompress import recompress, target_codec
from storage.segment import DELETED_SUFFIX, FileRecords, LogSegment

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append whose first batch starts below the log end offset (Kafka's
    UnexpectedAppendOffsetException, UNKNOWN_SERVER_ERROR on the wire). `first_offset` /
    `last_offset`: the first batch's base and last offsets."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    log_append_time: int = -1  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int = 0
    num_messages: int = 0
    valid_bytes: int = 0
    duplicate: bool = False  # idempotent retry: nothing written, original offsets returned
    # flush.messages reached by this append: an awaitable done once the log is fsynced up to
    # last_offset + 1 (await it before acknowledging to keep Kafka's semantics); else None
    flush_future: object = None


@dataclasses.dataclass
class FetchDataInfo:
    fetch_offset: int  # base offset of the first batch returned (<= requested offset)
    records: FileRecords


class Log(LogTransactions):
    """A partition log. Construct with `Log(dir_path, config, ...)`; it loads/recovers."""

    #: a fresh stamp (`CHANGE_STAMPS`) after every recovery-point or log-start-offset
    #: change: the log manager's periodic checkpoints of those skip gathering while it (and
    #: the set of logs) stays put (issue 22)
    _offset_changes = 0
    #: a fresh stamp after every log's config was replaced (topic config change): the
    #: cleaner's list of compacted logs is rebuilt only then (or when the logs change)
    _config_changes = 0
    #: a fresh stamp after every append (leader or follower) moved a log end offset
    _end_changes = 0

    @staticmethod
    def offset_changes() -> int:
        return Log._offset_changes

    @staticmethod
    def config_changes() -> int:
        return Log._config_changes

    @staticmethod
    def end_changes() -> int:
        return Log._end_changes

    @property
    def config(self) -> LogConfig:
        """The log's LogConfig (topic overrides over the broker defaults)."""
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        if config is not getattr(self, "_config", None):
            self._config = config
            Log._config_changes = next(CHANGE_STAMPS)

    def __init__(self, dir_path: str, config: LogConfig, *, recovery_point: int = 0,
                 log_start_offset: int = 0, clean_shutdown: bool = False,
                 time_ms: Callable[[], int] = wall_clock_ms,
                 on_roll: Callable[[Log, int], object] | None = None,
                 on_flush_needed: Callable[[Log, int], object] | None = None,
                 on_delete_segments: Callable[[Log, list[LogSegment]], None] | None = None,
                 topic_id: str | None = None, exists: bool = False,
                 topic_partition: tuple[str, int] | None = None):
        self.dir = dir_path
        self._config = config  # (a new log changes the logs' version, not the configs')
        self.time_ms = time_ms
        self.topic_id = sys.intern(topic_id) if topic_id is not None else None  # shared
        self.on_roll = on_roll  # flush segments below the given offset, off the loop
        self.on_flush_needed = on_flush_needed  # same, when flush.messages is reached
        self.on_delete_segments = on_delete_segments
        topic, self.partition = topic_partition if topic_partition is not None \
            else parse_topic_partition(os.path.basename(dir_path))
        self.topic = sys.intern(topic)  # one string per topic, not per partition
        if exists:  # the LogManager's startup: one listing answers every "is there a file"
            names = os.listdir(dir_path)
            epochs_file = LEADER_EPOCH_CHECKPOINT in names
        else:
            os.makedirs(dir_path, exist_ok=True)
            names = epochs_file = None
        self.leader_epoch_cache = LeaderEpochFileCache(dir_path, exists=epochs_file)
        self.producer_state = ProducerStateManager(dir_path, names=names)
        self._high_watermark = 0
        self._flush_scheduled_to = 0  # highest offset a flush.messages flush was asked up to
        self.last_flush_ms = time_ms()
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        result = load_segments(self, recovery_point, log_start_offset, clean_shutdown, names)
        self.recovery_point = result.recovery_point
        self.log_start_offset = result.log_start_offset
        self.log_end_offset = self.active_segment.read_next_offset()
        self.load_result = result  # recovery_point, truncated_bytes, recovered_segments
        self.high_watermark = min(self.log_start_offset, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    # --- segment list ---------------------------------------------------------------------
    def _new_segment(self, base_offset: int, active: bool = True,
                     files: Container[str] | None = None) -> LogSegment:
        """Open `<base_offset>.log` and its indexes (`files`: the dir's listing while
        loading, see `LogSegment`)."""
        return LogSegment(self.dir, base_offset,
                          index_interval_bytes=self.config.index_interval_bytes,
                          max_index_size=self.config.segment_index_bytes,
                          time_ms=self.time_ms, active=active, files=files,
                          now_ms=None if files is None else self.last_flush_ms)

    def _add_segment(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        if i < len(self._bases) and self._bases[i] == seg.base_offset:
            self.segments[i] = seg
        else:
            self._bases.insert(i, seg.base_offset)
            self.segments.insert(i, seg)

    def _remove_segments(self, segs: list[LogSegment]) -> None:
        gone = {id(s) for s in segs}
        self.segments = [s for s in self.segments if id(s) not in gone]
        self._bases = [s.base_offset for s in self.segments]

    def _floor_segment(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def num_segments(self) -> int:
        return len(self.segments)

    # --- append -----------------------------------------------------------------------------
    def append_as_leader(self, records, leader_epoch: int, origin: str = "client",
                         verification_guard: VerificationGuard | None = None
                         ) -> LogAppendInfo:
        """Validate, assign offsets, stamp `leader_epoch` and append v2 batches.

        `records`: a bytearray or writable memoryview is patched in place (else copied once).
        Raises CORRUPT_MESSAGE (torn batch, bad CRC, not magic 2), MESSAGE_TOO_LARGE (a batch
        > max.message.bytes), RECORD_LIST_TOO_LARGE (the append > segment.bytes),
        INVALID_RECORD (record count != lastOffsetDelta + 1, control batch from a client, a
        record without key on a `cleanup.policy=compact` topic, as Kafka's LogValidator),
        INVALID_PRODUCER_EPOCH / OUT_OF_ORDER_SEQUENCE_NUMBER (idempotence), INVALID_TXN_STATE
        (a transactional batch starting a transaction without the `verification_guard` of
        a KIP-890 verification, when `producer_state.verification_enabled`; a
        non-transactional batch inside an open transaction), TRANSACTION_COORDINATOR_FENCED
        (a marker from an older coordinator epoch). A duplicate of one of a producer's last 5
        batches is not written: its original offsets come back with `duplicate=True`.
        """
        buf = records if isinstance(records, bytearray) or (
            isinstance(records, memoryview) and not records.readonly) else bytearray(records)
        batches = self._analyze(buf)
        compacted = origin == "client" and "compact" in self.config.cleanup_policy
        pending: dict[int, tuple[int, int, bool]] = {}
        for b in batches:
            if b.record_count != b.last_offset_delta + 1:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"record count {b.record_count} does not match last offset "
                                 f"delta {b.last_offset_delta}")
            if b.is_control and origin == "client":
                raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
            if compacted and not b.is_control:
                keyless = [i for i, r in enumerate(b.iter_records()) if r.key is None]
                if keyless:  # KIP-467: the indexes of the failing records
                    raise RecordValidationError([
                        (i, "Compacted topic cannot accept message without key in topic "
                            f"partition {self.topic}-{self.partition}.") for i in keyless])
            dup = self.producer_state.check(b, pending, origin, verification_guard) \
                if origin != "replication" else None
            if dup is not None:
                return LogAppendInfo(dup.first_offset, dup.last_offset, dup.max_timestamp,
                                     dup.last_offset, -1, self.log_start_offset, 0, 0,
                                     duplicate=True)
        # compression.type: rebuild batches in the topic's codec (storage.recompress)
        converted = recompress(buf, batches, target_codec(self.config.compression_type))
        if converted is not None:
            buf, batches = converted
        now = self.time_ms()
        append_time = now if self.config.log_append_time else -1
        next_offset = self.log_end_offset
        for b in batches:
            b.set_base_offset(next_offset)
            b.set_partition_leader_epoch(leader_epoch)
            if append_time >= 0:
                b.set_max_timestamp(append_time, LOG_APPEND_TIME)
            next_offset = b.last_offset + 1
        info = self._append(buf, batches, leader_epoch_from_batches=False, now=now)
        info.log_append_time = append_time
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, info.first_offset)
        return info

    def append_as_follower(self, records) -> LogAppendInfo:
        """Append batches fetched from the leader, offsets kept. Raises CORRUPT_MESSAGE /
        MESSAGE_TOO_LARGE as for the leader, and UNKNOWN_SERVER_ERROR when the first offset
        is below the log end offset or offsets go backwards (Kafka's
        OffsetsOutOfOrderException; `UnexpectedAppendOffsetError` for the first batch)."""
        buf = records if isinstance(records, bytearray | bytes | memoryview) else bytes(records)
        batches = self._analyze(buf, check_size=False)
        expected = self.log_end_offset
        for i, b in enumerate(batches):
            if b.base_offset < expected:
                message = f"follower append: offset {b.base_offset} < expected {expected}"
                if i == 0:
                    raise UnexpectedAppendOffsetError(message, b.base_offset, b.last_offset)
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, message)
            expected = b.last_offset + 1
        for b in batches:
            if b.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(b.partition_leader_epoch, b.base_offset)
        return self._append(buf, batches, leader_epoch_from_batches=True)

    def _analyze(self, buf, check_size: bool = True) -> list[RecordBatch]:
        try:
            batches = list(iter_batches(buf))
            for b in batches:
                b.validate()
        except CorruptRecordError:
            raise
        except (ValueError, TypeError) as e:
            raise CorruptRecordError(f"malformed record batch: {e}") from e
        for b in batches:
            if check_size and b.size_in_bytes > self.config.max_message_bytes:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"batch of {b.size_in_bytes} bytes > max.message.bytes "
                                 f"{self.config.max_message_bytes}")
        if len(buf) > self.config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"{len(buf)} bytes > segment.bytes {self.config.segment_bytes}")
        return batches

    def _append(self, buf, batches: list[RecordBatch], leader_epoch_from_batches: bool,
                now: int | None = None) -> LogAppendInfo:
        """Write validated batches to the (maybe rolled) active segment. `now` (ms): the
        clock reading the caller already took, so one append reads the clock once."""
        if not batches:
            return LogAppendInfo(-1, -1, log_start_offset=self.log_start_offset)
        first, last = batches[0].base_offset, batches[-1].last_offset
        max_ts, off_max = -1, first
        meta = []
        messages = 0
        for b in batches:
            if b.max_timestamp > max_ts:
                max_ts, off_max = b.max_timestamp, b.last_offset
            meta.append((b.last_offset, b.max_timestamp, b.size_in_bytes))
            messages += b.record_count
        if now is None:
            now = self.time_ms()
        seg = self._maybe_roll(len(buf), max_ts, first, last, now)
        seg.append(buf, meta, now)
        producer_state = self.producer_state
        for b in batches:
            if b.producer_id >= 0:
                completed = producer_state.update(b)
                if completed is not None:
                    record_completed_txn(producer_state, seg, completed)
        self.log_end_offset = last + 1
        Log._end_changes = next(CHANGE_STAMPS)
        flushed = None
        if self.log_end_offset - max(self.recovery_point, self._flush_scheduled_to) \
                >= self.config.flush_interval_messages:
            # Kafka (UnifiedLog.append) fsyncs inside the append once flush.messages is
            # reached, so the produce response follows the fsync. Here the fsync is only
            # scheduled off the event loop; the caller awaits `flush_future` before acking.
            # Offsets already covered by a scheduled flush do not count twice.
            self._flush_scheduled_to = self.log_end_offset
            flushed = self._schedule_flush(self.on_flush_needed, self.log_end_offset)
        return LogAppendInfo(first, last, max_ts, off_max, -1, self.log_start_offset,
                             messages, len(buf), flush_future=flushed)

    def _schedule_flush(self, hook: Callable[[Log, int], object] | None, offset: int):
        """Flush below `offset` off the event loop: through `hook` (LogManager: executor,
        returns a future), else in the default executor when a loop runs in this thread,
        else at once (tools, crash tests). Returns an awaitable or None."""
        if hook is not None:
            return hook(self, offset)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush(offset)
            return None
        return loop.run_in_executor(None, self.flush, offset)

    # --- roll -------------------------------------------------------------------------------
    def _maybe_roll(self, size: int, max_ts: int, first_offset: int, last_offset: int,
                    now: int | None = None) -> LogSegment:
        """Roll when the append would overflow segment.bytes, segment.ms passed, an index is
        full, or `last_offset` does not fit a 32-bit relative offset (Kafka's shouldRoll).
        `now`: ms, read from `time_ms` when not given."""
        seg = self.segments[-1]
        if now is None:
            now = self.time_ms()
        if seg.size > 0 and (
            seg.size > self.config.segment_bytes - size
            or seg.time_waited_for_roll(now, max_ts) > self.config.segment_ms
            - self.config.segment_jitter_ms
            or seg.offset_index.is_full or seg.time_index.is_full
            or last_offset - seg.base_offset > 0x7FFFFFFF
        ):
            return self.roll(first_offset)
        if seg.size == 0 and last_offset - seg.base_offset > 0x7FFFFFFF:
            return self.roll(first_offset)
        return seg

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment (final time-index entry, trimmed indexes) and open a new
        one at max(expected_next_offset, LEO). The old segments are then flushed via the
        `on_roll` hook (LogManager: in an executor) or synchronously."""
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        old = self.active_segment
        if old.base_offset == new_base and old.size == 0:
            return old
        old.on_become_inactive()
        self.producer_state.take_snapshot(new_base)  # fsynced by the next flush
        self._retain_snapshots()
        seg = self._new_segment(new_base)
        self._add_segment(seg)
        self._schedule_flush(self.on_roll, new_base)
        return seg

    # --- read -------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """File slices from the batch holding `start_offset` (which may begin before it),
        at most `max_bytes` (but a whole first batch with `min_one_message`, KIP-74), never
        reaching `max_offset` (exclusive: e.g. the high watermark).

        Raises OFFSET_OUT_OF_RANGE unless log_start_offset <= start_offset <= LEO."""
        leo = self.log_end_offset
        if start_offset < self.log_start_offset or start_offset > leo:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {start_offset} not in [{self.log_start_offset}, {leo}] "
                             f"of {self.topic}-{self.partition}")
        if start_offset == leo or (max_offset is not None and start_offset >= max_offset):
            return FetchDataInfo(start_offset, FileRecords())
        if max_offset is not None and max_offset >= leo:
            # fast path (a consumer at HW == LEO): no batch reaches max_offset, so there is no
            # end position to look up (that lookup scans the active segment's tail)
            max_offset = None
        segments = self.segments
        i = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        while i < len(segments):
            seg = segments[i]
            max_position = None
            if max_offset is not None and (i + 1 >= len(segments)
                                           or max_offset < segments[i + 1].base_offset):
                h = seg.translate_offset(max_offset)
                max_position = h.position if h is not None else None
            got = seg.read(start_offset, max_bytes, max_position, min_one_message)
            if got is not None:
                return FetchDataInfo(got[0], got[1])
            i += 1
        return FetchDataInfo(start_offset, FileRecords())

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) of the first record with timestamp >=
        `timestamp`; -2 (earliest) -> (log start, -1); -1 (latest) -> (LEO, -1); -3 (max
        timestamp, KIP-734) -> (offset of the first record carrying the largest timestamp, it;
        KAFKA-16310). None if
        no record is that recent."""
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp == MAX_TIMESTAMP:
            best = max(self.segments, key=lambda s: s.max_timestamp_so_far)
            return best.find_max_timestamp_record()
        for seg in self.segments:
            if seg.max_timestamp_so_far >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    # --- truncation -------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: remove batches at or after `offset` (a batch spanning it
        stays whole). Returns True if anything was removed. Even when nothing is removed the
        epoch cache loses entries starting at or after the LEO (Kafka's UnifiedLog.truncateTo:
        a broker that led an epoch without appending holds an entry for it that the new
        leader does not know; kept, it would make the follower diverge forever)."""
        if offset < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"cannot truncate to {offset}")
        if offset >= self.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        doomed = [s for s in self.segments if s.base_offset >= offset and s is not self.segments[0]]
        if doomed:
            self._remove_segments(doomed)
            self._delete_segment_files(doomed)
        active = self.active_segment
        active.truncate_to(offset)
        active.offset_index.resize(self.config.segment_index_bytes)
        active.time_index.resize(self.config.segment_index_bytes)
        self.log_end_offset = active.read_next_offset()
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._reload_producer_state()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        Log._offset_changes = next(CHANGE_STAMPS)
        self._flush_scheduled_to = min(self._flush_scheduled_to, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at `offset` (log start = LEO =
        recovery point = HW = offset); clears the epoch cache and producer state."""
        doomed = list(self.segments)
        self.segments, self._bases = [], []
        self._delete_segment_files(doomed)
        self._add_segment(self._new_segment(offset))
        self.log_start_offset = self.log_end_offset = offset
        self.recovery_point = self.high_watermark = offset
        Log._offset_changes = next(CHANGE_STAMPS)
        self._flush_scheduled_to = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully()

    # --- retention / log start --------------------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to `offset` (no-op if not larger) and
        drop whole segments below it. Raises OFFSET_OUT_OF_RANGE if `offset` > high watermark.
        Returns the new log start offset."""
        if offset > self.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"cannot delete before {offset}: beyond high watermark "
                             f"{self.high_watermark}")
        if offset > self.log_start_offset:
            self._set_log_start(offset)
            self._delete_prefix(lambda seg, nxt: nxt is not None and nxt <= self.log_start_offset)
        return self.log_start_offset

    def _set_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        Log._offset_changes = next(CHANGE_STAMPS)
        self.leader_epoch_cache.truncate_from_start(offset)

    def delete_old_segments(self) -> int:
        """Apply retention.ms (segment's largest timestamp older than now - retention.ms),
        retention.bytes (drop oldest while the rest still exceeds it) and log-start breaches.
        Never deletes the active segment. Returns the number of segments deleted."""
        now = self.time_ms()
        n = 0
        if self.config.retention_ms >= 0:
            n += self._delete_prefix(
                lambda seg, nxt: now - seg.largest_timestamp() > self.config.retention_ms)
        if self.config.retention_bytes >= 0:
            excess = [self.size_in_bytes - self.config.retention_bytes]

            def over(seg, nxt):
                if excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False
            n += self._delete_prefix(over)
        n += self._delete_prefix(lambda seg, nxt: nxt is not None and nxt <= self.log_start_offset)
        return n

    def _delete_prefix(self, predicate) -> int:
        doomed = []
        for i, seg in enumerate(self.segments[:-1]):
            nxt = self.segments[i + 1].base_offset
            if nxt > self.high_watermark:
                break  # only segments wholly below the high watermark (Kafka's upper bound)
            if not predicate(seg, nxt):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        self._remove_segments(doomed)
        new_start = self.segments[0].base_offset
        if new_start > self.log_start_offset:
            self._set_log_start(new_start)
            self.producer_state.truncate_start(new_start)
        self._delete_segment_files(doomed)
        return len(doomed)

    def _delete_segment_files(self, segs: list[LogSegment]) -> None:
        """Rename to `.deleted` now; close and unlink later via the hook (in-flight reads
        may still hold the files), or at once without a hook."""
        for seg in segs:
            try:
                seg.change_suffix("", DELETED_SUFFIX)
            except FileNotFoundError:
                pass
        if self.on_delete_segments is not None:
            self.on_delete_segments(self, segs)
        else:
            for seg in segs:
                seg.delete_files()

    # --- flush / close ------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync segments holding offsets below `offset` (default: LEO), write the epoch
        checkpoint, then advance the recovery point. Blocking: from the event loop use
        `await loop.run_in_executor(None, log.flush)`."""
        target = self.log_end_offset if offset is None else offset
        if target <= self.recovery_point:
            return
        self.last_flush_ms = self.time_ms()
        segs = list(self.segments)
        # only the segments from the one holding the recovery point (Kafka's
        # logSegments(recoveryPoint, offset)): those below were fsynced before
        first = max(bisect.bisect_right([s.base_offset for s in segs], self.recovery_point) - 1, 0)
        for seg in segs[first:]:
            if seg.base_offset < target:
                seg.flush()
        self.leader_epoch_cache.flush()
        self.producer_state.sync_snapshots()
        self.recovery_point = max(self.recovery_point, target)
        Log._offset_changes = next(CHANGE_STAMPS)

    @property
    def unflushed_messages(self) -> int:
        """Offsets appended but not yet fsynced: LEO - recovery point (Kafka's
        unflushedMessages)."""
        return self.log_end_offset - self.recovery_point

    def needs_time_flush(self) -> bool:
        return self.unflushed_messages > 0 and \
            self.time_ms() - self.last_flush_ms >= self.config.flush_interval_ms

    def close(self, sync: bool = True) -> None:
        """Trim the active indexes and close every file (clean shutdown, after `flush`);
        a producer snapshot at the log end lets the next load skip the replay (none for an
        empty log: there is nothing to replay). `sync=False` leaves
        the durability of the snapshot and the epoch checkpoint to the caller (LogManager
        syncs the whole file system once at shutdown)."""
        if self.log_end_offset > 0:  # a never-written log's epochs are all at offset 0: the
            self.leader_epoch_cache.flush(sync=sync)  # next LeaderAndIsr assigns them again
        if self.log_end_offset > self.log_start_offset or self.producer_state.producers:
            self.producer_state.take_snapshot(self.log_end_offset, sync=sync)
        if sync:
            self.producer_state.sync_snapshots()
        else:
            self.producer_state.unsynced_snapshots.clear()
        for seg in self.segments:
            if seg is self.active_segment and seg.max_timestamp_so_far >= 0:
                seg.on_become_inactive()
            seg.close()

    def close_handlers(self) -> None:
        for seg in self.segments:
            seg.close_handlers()

    def __repr__(self):
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")


def parse_topic_partition(name: str) -> tuple[str, int]:
    """`my-topic-3` -> ("my-topic", 3); also accepts `<tp>.<uuid>-delete` and
    `<tp>.<uuid>-future` (a replica moving between log dirs, KIP-113) names."""
    base = name.rsplit(".", 1)[0] if name.endswith(("-delete", "-future")) else name
    topic, _, part = base.rpartition("-")
    try:
        return topic, int(part)
    except ValueError:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"not a partition directory: {name}") \
            from None


__all__ = ["Log", "LogAppendInfo", "FetchDataInfo", "CorruptIndexError", "parse_topic_partition"]
