"""`Partition`: one topic-partition hosted by this broker (Kafka's `kafka.cluster.Partition`).

Holds the local `storage.log.Log` plus the replication state the controller decided
(leader id, leader epoch, ISR, replicas, partition epoch) and, on the leader, what each
follower last fetched (its log end offset). Owns the high watermark rule:

    HW = min(LEO of the leader, LEO of every other ISR member)      (Kafka's
    maybeIncrementLeaderHW; with ISR {self} the HW follows the LEO after every append)

Byte accounting for DelayedFetch (Kafka compares LogOffsetMetadata positions; we keep two
monotonic counters instead): `end_bytes` = bytes appended since this Partition object was
made, `hw_bytes` = the part of them below the high watermark. A parked fetch remembers the
counter when it parked and completes once the growth reaches `fetch.min.bytes`.

Called from the event loop only (the ReplicaManager). Errors are `KafkaError`s with Kafka's
codes: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, OFFSET_OUT_OF_RANGE and the log's.
"""

from __future__ import annotations

import collections
import dataclasses
import time
import uuid
from collections.abc import Callable

from protocol.errors import ErrorCode, KafkaError, RecordValidationError
from protocol.records import iter_batches
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log, LogAppendInfo
from storage.segment import FileRecords

__all__ = ["Partition", "LogReadInfo", "FollowerState", "READ_UNCOMMITTED", "READ_COMMITTED",
           "EARLIEST_LOCAL_TIMESTAMP", "LATEST_TIERED_TIMESTAMP"]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: first offset of the local log
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: no tiered storage here -> offset -1
NO_LEADER = -1
LONG_MAX = (1 << 63) - 1


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica): its fetched LEO and when it
    last caught up (for ISR shrink/expand, not implemented yet)."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0


@dataclasses.dataclass(slots=True)
class LogReadInfo:
    """One partition's read: the records (file slices) and the offsets sent with them."""

    records: FileRecords
    fetch_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    # READ_COMMITTED reads with data: [(producer_id, first_offset)] of aborted transactions
    # overlapping the read (FetchResponse aborted_transactions); else None
    aborted_transactions: list | None = None


class Partition:
    """A hosted partition. `log` is None only while the partition is being created."""

    def __init__(self, topic: str, partition: int, local_broker_id: int, log: Log,
                 topic_id: uuid.UUID | None = None,
                 time_ms: Callable[[], int] = _now_ms) -> None:
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.log = log
        self.topic_id = topic_id
        self.time_ms = time_ms
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.min_insync_replicas = 1
        # message.timestamp.before.max.ms / after.max.ms (KIP-937), CreateTime topics only
        self.timestamp_before_max_ms = LONG_MAX
        self.timestamp_after_max_ms = LONG_MAX
        self.followers: dict[int, FollowerState] = {}
        self.end_bytes = 0
        self.hw_bytes = 0
        self._pending_hw: collections.deque[tuple[int, int]] = collections.deque()
        self.deleted = False

    # --- state ----------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """LSO: the HW, or the first offset of the earliest open (or not yet replicated)
        transaction below it (`storage.log.Log.last_stable_offset`)."""
        return self.log.last_stable_offset

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, "
                f"epoch={self.leader_epoch}, isr={list(self.isr)}, hw={self.high_watermark}, "
                f"leo={self.log_end_offset})")

    # --- controller decisions ---------------------------------------------------------------
    def make_leader(self, state, topic_id: uuid.UUID | None = None) -> bool:
        """Apply a LeaderAndIsr partition state naming this broker leader (Kafka's
        makeLeader). Returns True if this is a new leadership or a new leader epoch (parked
        operations on the partition must then be completed). Follower states are reset."""
        changed = not self.is_leader or state.leader_epoch != self.leader_epoch
        self._apply_state(state, topic_id)
        now = self.time_ms()
        self.followers = {r: self.followers.get(r) or FollowerState(r, last_caught_up_ms=now)
                          for r in self.replicas if r != self.local_broker_id}
        if changed:
            for f in self.followers.values():
                f.log_end_offset = -1
        self.maybe_increment_high_watermark()
        return changed

    def make_follower(self, state, topic_id: uuid.UUID | None = None) -> bool:
        """Apply a partition state naming another broker (or none) leader. Returns True if
        leadership or epoch changed. (No replica fetcher yet: the log only stops taking
        client writes.)"""
        changed = self.leader_id != state.leader or state.leader_epoch != self.leader_epoch
        self._apply_state(state, topic_id)
        self.followers = {}
        self._pending_hw.clear()
        return changed

    def _apply_state(self, state, topic_id) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = getattr(state, "partition_epoch", getattr(state, "zk_version", -1))
        self.controller_epoch = state.controller_epoch
        self.isr = tuple(state.isr)
        self.replicas = tuple(state.replicas)
        if topic_id is not None:
            self.topic_id = topic_id
            self.log.topic_id = str(topic_id)

    # --- leader epoch checks -----------------------------------------------------------------
    def check_leader_epoch(self, current_leader_epoch: int, require_leader: bool = True) -> None:
        """Kafka's getLocalLog checks: a client's `current_leader_epoch` (-1 = not given)
        older than ours -> FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH; not the leader
        when `require_leader` -> NOT_LEADER_OR_FOLLOWER."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                                 f"{self.topic}-{self.partition}: epoch {current_leader_epoch} "
                                 f"< current {self.leader_epoch}")
            if current_leader_epoch > self.leader_epoch:
                raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                                 f"{self.topic}-{self.partition}: epoch {current_leader_epoch} "
                                 f"> current {self.leader_epoch}")
        if require_leader and not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.local_broker_id} is not the leader of "
                             f"{self.topic}-{self.partition} (leader {self.leader_id})")

    # --- append ---------------------------------------------------------------------------------
    def append_records_to_leader(self, records, required_acks: int, origin: str = "client",
                                 verification_guard=None) -> tuple[LogAppendInfo, bool]:
        """Append as leader (Kafka's appendRecordsToLeader). Returns (info, hw_advanced).

        NOT_LEADER_OR_FOLLOWER when not the leader; NOT_ENOUGH_REPLICAS for acks=-1 when the
        ISR is smaller than min.insync.replicas (nothing written); the log's errors otherwise.
        """
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.local_broker_id} is not the leader of "
                             f"{self.topic}-{self.partition}")
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{self.topic}-{self.partition}: ISR {list(self.isr)} smaller than "
                             f"min.insync.replicas {self.min_insync_replicas}")
        if (self.timestamp_before_max_ms != LONG_MAX or self.timestamp_after_max_ms != LONG_MAX) \
                and not self.log.config.log_append_time:
            self._validate_timestamps(records)
        info = self.log.append_as_leader(records, self.leader_epoch, origin,
                                         verification_guard)
        if info.duplicate or info.valid_bytes == 0:
            return info, False
        self.end_bytes += info.valid_bytes
        if len(self.isr) <= 1:  # ISR {self}: the HW follows the LEO at once
            self.log.high_watermark = self.log.log_end_offset
            self.hw_bytes = self.end_bytes
            return info, True
        self._pending_hw.append((self.log.log_end_offset, self.end_bytes))
        return info, self.maybe_increment_high_watermark()

    def _validate_timestamps(self, records) -> None:
        """INVALID_TIMESTAMP when a batch's first or largest timestamp (ms) is more than
        message.timestamp.before.max.ms in the past or after.max.ms in the future: a batch
        whose base and max timestamps are in range passes; otherwise every record is checked
        and the out-of-range ones are named (`RecordValidationError`, KIP-467)."""
        now = self.time_ms()
        low = now - self.timestamp_before_max_ms
        high = now + self.timestamp_after_max_ms
        try:
            batches = list(iter_batches(records))
        except (KafkaError, ValueError):
            return  # the log reports the corruption
        for b in batches:
            if all(ts < 0 or low <= ts <= high for ts in (b.base_timestamp, b.max_timestamp)):
                continue
            # some record is out of range: name each one (KIP-467 record_errors)
            bad = [(i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of "
                       f"range. The timestamp should be within [{low}, {high}]")
                   for i, r in enumerate(b.iter_records())
                   if r.timestamp >= 0 and not low <= r.timestamp <= high]
            if bad:
                raise RecordValidationError(bad, timestamp=True)

    def maybe_increment_high_watermark(self) -> bool:
        """Raise the HW to the smallest LEO among the ISR; True if it moved."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for r in self.isr:
            if r != self.local_broker_id:
                f = self.followers.get(r)
                new_hw = min(new_hw, f.log_end_offset if f is not None else -1)
        log = self.log
        if new_hw <= log.high_watermark:
            return False
        log.high_watermark = new_hw
        pending = self._pending_hw
        while pending and pending[0][0] <= new_hw:
            self.hw_bytes = pending.popleft()[1]
        if new_hw == log.log_end_offset:
            self.hw_bytes = self.end_bytes
            pending.clear()
        return True

    def check_enough_replicas_reached_offset(self, required_offset: int
                                             ) -> tuple[bool, ErrorCode]:
        """DelayedProduce (acks=-1): (done, error). Done with NONE once HW >= required_offset
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas);
        done with NOT_LEADER_OR_FOLLOWER if leadership moved."""
        if not self.is_leader or self.deleted:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if len(self.isr) < self.min_insync_replicas:
                return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, ErrorCode.NONE
        return False, ErrorCode.NONE

    # --- follower fetch hook -------------------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetched from `fetch_offset` (= its LEO). Records it and returns True if
        the HW advanced. NOT_LEADER_OR_FOLLOWER for a broker that is not a replica."""
        f = self.followers.get(replica_id)
        if f is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of "
                             f"{self.topic}-{self.partition}")
        now = self.time_ms()
        f.log_end_offset = fetch_offset
        f.last_fetch_ms = now
        if fetch_offset >= self.log.log_end_offset:
            f.last_caught_up_ms = now
        return self.maybe_increment_high_watermark()

    # --- read -------------------------------------------------------------------------------------
    def read_records(self, fetch_offset: int, max_bytes: int, *, current_leader_epoch: int = -1,
                     fetch_only_from_leader: bool = True, is_follower: bool = False,
                     isolation_level: int = READ_UNCOMMITTED, min_one_message: bool = True
                     ) -> LogReadInfo:
        """Read for a fetch (Kafka's fetchRecords/readRecords): consumers up to the HW
        (read_committed: the LSO), followers up to the LEO. The offsets are captured before
        the read so a concurrent append can only make them stale-low, never ahead of the
        data. OFFSET_OUT_OF_RANGE outside [log start, LEO]."""
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        log = self.log
        hw = log.high_watermark
        lso = self.last_stable_offset
        leo = log.log_end_offset
        if is_follower:
            max_offset = None
        elif isolation_level == READ_COMMITTED:
            max_offset = lso
        else:
            max_offset = hw
        data = log.read(fetch_offset, max_bytes, max_offset, min_one_message)
        aborted = None
        if isolation_level == READ_COMMITTED and not is_follower:
            aborted = log.collect_aborted_transactions(
                fetch_offset, log.fetch_upper_bound(fetch_offset)) if len(data.records) else []
        return LogReadInfo(data.records, fetch_offset, hw, lso, log.log_start_offset, leo,
                           aborted)

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int,
                                             epoch: int):
        """KIP-890 part 1 (Kafka's Partition.maybeStartTransactionVerification): None when
        the producer already has an open transaction here, else the verification guard to
        append with once the coordinator confirmed the partition. NOT_LEADER_OR_FOLLOWER
        when not the leader."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.local_broker_id} is not the leader of "
                             f"{self.topic}-{self.partition}")
        return self.log.maybe_start_transaction_verification(producer_id, sequence, epoch)

    # --- offsets -----------------------------------------------------------------------------------
    def fetch_offset_for_timestamp(self, timestamp: int, isolation_level: int | None,
                                   current_leader_epoch: int = -1,
                                   fetch_only_from_leader: bool = True
                                   ) -> tuple[int, int, int]:
        """ListOffsets (Kafka's fetchOffsetForTimestamp): (timestamp, offset, leader epoch),
        offset -1 when nothing matches. `isolation_level` None = a replica (reads to LEO).

        -2 earliest (log start), -4 earliest local (the same: no tiered storage), -1 latest
        (HW, LSO for read_committed, LEO for replicas), -3 max timestamp (KIP-734), -5 latest
        tiered (-1), else the first offset with timestamp >= `timestamp` below the
        last fetchable offset."""
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        log = self.log
        if isolation_level is None:
            last_fetchable = log.log_end_offset
        elif isolation_level == READ_COMMITTED:
            last_fetchable = self.last_stable_offset
        else:
            last_fetchable = log.high_watermark
        cache = log.leader_epoch_cache
        if timestamp == LATEST_TIMESTAMP:
            return -1, last_fetchable, self.leader_epoch
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = log.log_start_offset
            return -1, start, cache.epoch_for_offset(start)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1, -1
        if timestamp == MAX_TIMESTAMP:
            found = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
        elif timestamp < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid timestamp {timestamp}")
        else:
            found = log.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= last_fetchable:
            return -1, -1, -1
        offset, ts = found
        return ts, offset, cache.epoch_for_offset(offset)

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int,
                              replica: bool) -> list[int]:
        """ListOffsets v0 `old_style_offsets` (Kafka's fetchOffsetsBefore): latest -> the HW
        (LEO for replicas) then segment base offsets, descending; earliest -> [log start];
        else base offsets of segments whose newest record is not after `timestamp`."""
        log = self.log
        upper = log.log_end_offset if replica else log.high_watermark
        bases = [s.base_offset for s in log.segments]
        if timestamp == LATEST_TIMESTAMP:
            offsets = [upper] + [b for b in reversed(bases) if b < upper]
        elif timestamp == EARLIEST_TIMESTAMP:
            offsets = [log.log_start_offset]
        else:
            offsets = [max(s.base_offset, log.log_start_offset) for s in reversed(log.segments)
                       if s.largest_timestamp() <= timestamp and s.base_offset < upper]
        seen: dict[int, None] = dict.fromkeys(offsets)
        return list(seen)[:max(max_num_offsets, 0)]

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int,
                                     fetch_only_from_leader: bool) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101/279): (epoch, end offset) from the epoch cache."""
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        return self.log.leader_epoch_cache.end_offset_for_epoch(leader_epoch,
                                                                self.log.log_end_offset)
