"""`Partition`: one topic-partition hosted by this broker (Kafka's `kafka.cluster.Partition`).

Holds the local `storage.log.Log` plus the replication state the controller decided
(leader id, leader epoch, ISR, replicas, partition epoch, KIP-704 leader recovery state) and,
on the leader, what each follower last fetched (`broker.replication.replica_state`).

Leader rules (Kafka 3.9's Partition):
- high watermark = the smallest LEO among the leader and every follower that is in the
  "maximal ISR" (committed ISR plus a pending expansion, KIP-497) or is caught up and could
  join it; it never moves backwards. With no followers it follows the LEO after every
  append. (Kafka 3.7+ also freezes the HW while the ISR is below min.insync.replicas,
  KIP-966; the issue's rule, kept here, lets it follow the ISR so that a waiting acks=-1
  produce is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND.)
- ISR expansion: a follower outside the ISR whose LEO reaches the HW and the start offset of
  the current leader epoch is proposed to the controller (AlterPartition, one change in flight
  at a time). ISR shrink (`maybe_shrink_isr`, run every replica.lag.time.max.ms / 2 by the
  ReplicaManager): ISR followers not caught up for replica.lag.time.max.ms are proposed out.
  The controller's answer commits the new ISR and partition epoch.
- acks=-1: NOT_ENOUGH_REPLICAS before the append when the committed ISR is below
  min.insync.replicas; a DelayedProduce completes once HW >= its last offset + 1
  (NOT_ENOUGH_REPLICAS_AFTER_APPEND when the maximal ISR shrank below min.insync.replicas).
- Follower fetches read up to the LEO; a fetch whose `last_fetched_epoch` disagrees with the
  leader's epoch history gets a diverging epoch (KIP-595 truncation on fetch) and no data.
Follower rules: `append_records_as_follower` (the leader's batches unchanged), HW = min(leader
HW, own LEO) never backwards, log start offset follows the leader's, truncation by epochs.

Byte accounting for DelayedFetch (Kafka compares LogOffsetMetadata positions; we keep two
monotonic counters instead): `end_bytes` = bytes appended since this Partition object was
made, `hw_bytes` = the part of them below the high watermark. A parked fetch remembers the
counter when it parked and completes once the growth reaches `fetch.min.bytes`; truncation
lowers both (parked fetches then complete, DelayedFetch case C).

Called from the event loop only (the ReplicaManager and the replica fetchers). Errors are
`KafkaError`s with Kafka's codes: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
OFFSET_OUT_OF_RANGE and the log's.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType

from broker.replication.isr import LeaderIsrMixin
from broker.replication.replica_state import (
    LEADER_RECOVERED,
    FollowerState,
    PendingIsrChange,
    shared_ids,
    topic_id_text,
)
from protocol.errors import ErrorCode, KafkaError, RecordValidationError
from protocol.records import iter_batches
from storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    LogAppendInfo,
    UnexpectedAppendOffsetError,
)
from storage.log_transactions import CHANGE_STAMPS
from storage.segment import FileRecords

__all__ = ["Partition", "LogReadInfo", "FollowerState", "READ_UNCOMMITTED", "READ_COMMITTED",
           "EARLIEST_LOCAL_TIMESTAMP", "LATEST_TIERED_TIMESTAMP",
           "EARLIEST_PENDING_UPLOAD_TIMESTAMP"]

log = logging.getLogger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: first offset of the local log
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: no tiered storage here -> offset -1
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023: no tiered storage here -> offset -1
NO_LEADER = -1
LONG_MAX = (1 << 63) - 1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30000

def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(slots=True)
class LogReadInfo:
    """One partition's read: the records (file slices) and the offsets sent with them;
    `diverging_epoch` = (epoch, end offset) when a follower must truncate first."""

    records: FileRecords
    fetch_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    # READ_COMMITTED reads with data: [(producer_id, first_offset)] of aborted transactions
    # overlapping the read (FetchResponse aborted_transactions); else None
    aborted_transactions: list | None = None
    diverging_epoch: tuple[int, int] | None = None


class Partition(LeaderIsrMixin):
    """A hosted partition. `alter_partition(partition, LeaderAndIsr) -> Future[LeaderAndIsr]`
    sends an ISR change to the controller (None: ISR changes are not proposed);
    `is_replica_isr_eligible(broker_id)` (ZooKeeper mode: the broker is alive);
    `on_delayed_wake()` is called when an asynchronous event (an AlterPartition answer) moved
    the HW, so parked operations can complete.

    Memory: one per hosted replica (100,000 on a broker of a 100,000-partition RF 3 cluster),
    so slots, and nothing allocated per partition until used: `_pending_hw` is None while
    no append waits for the HW, `refused_isr_adds` None until the controller refuses an
    addition, the hooks are shared callables (`wake_hook(tp)` for `on_delayed_wake`)."""

    #: a fresh stamp (`CHANGE_STAMPS`) after any partition's leader or epochs changed
    #: (`ReplicaManager.led_partitions` lists the led ones again only then)
    leadership_changes = 0
    #: a fresh stamp after any follower's fetch moved its log end offset (as the leader saw)
    follower_end_changes = 0

    __slots__ = ("topic", "partition", "local_broker_id", "log", "topic_id", "time_ms",
                 "leader_id", "leader_epoch", "partition_epoch", "controller_epoch", "isr",
                 "replicas", "adding_replicas", "removing_replicas", "leader_recovery_state",
                 "leader_epoch_start_offset", "pending_isr", "refused_isr_adds",
                 "min_insync_replicas", "replica_lag_time_max_ms", "alter_partition",
                 "is_replica_isr_eligible", "wake_hook", "timestamp_before_max_ms",
                 "timestamp_after_max_ms", "followers", "end_bytes", "hw_bytes", "_pending_hw",
                 "deleted")

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
        self.adding_replicas: tuple[int, ...] = ()
        self.removing_replicas: tuple[int, ...] = ()
        self.leader_recovery_state = LEADER_RECOVERED
        self.leader_epoch_start_offset: int | None = None
        self.pending_isr: PendingIsrChange | None = None
        #: replica -> (not before ms, last wait ms): additions the controller refused
        self.refused_isr_adds: dict[int, tuple[int, int]] | None = None
        self.min_insync_replicas = 1
        self.replica_lag_time_max_ms = DEFAULT_REPLICA_LAG_TIME_MAX_MS
        self.alter_partition: Callable | None = None
        self.is_replica_isr_eligible: Callable[[int], bool] = _always
        #: called with (topic, partition) by `on_delayed_wake`; shared by every partition
        self.wake_hook: Callable[[tuple[str, int]], None] | None = None
        # message.timestamp.before.max.ms / after.max.ms (KIP-937), CreateTime topics only
        self.timestamp_before_max_ms = LONG_MAX
        self.timestamp_after_max_ms = LONG_MAX
        self.followers: dict[int, FollowerState] = _NO_FOLLOWERS  # replaced, never mutated
        self.end_bytes = 0
        self.hw_bytes = 0
        #: (offset, end bytes) of appends above the HW, oldest first; None when there are none
        self._pending_hw: collections.deque[tuple[int, int]] | None = None
        self.deleted = False

    def on_delayed_wake(self) -> None:
        """An asynchronous event moved the HW: parked operations on this partition re-check."""
        hook = self.wake_hook
        if hook is not None:
            hook((self.topic, self.partition))

    def _note_pending_hw(self) -> None:
        pending = self._pending_hw
        if pending is None:
            pending = self._pending_hw = collections.deque()
        pending.append((self.log.log_end_offset, self.end_bytes))

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
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the HW and acks=-1 rely on: a pending expansion counts (KIP-497)."""
        pending = self.pending_isr
        return self.isr if pending is None else pending.maximal_isr

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas (the topic's, else the broker's). Kafka 3.7+ caps it at the
        replication factor and freezes the HW below it (KIP-966); Josef keeps the earlier
        rule the issue specifies (NOT_ENOUGH_REPLICAS even when RF < min.insync.replicas,
        and the HW still follows the ISR so a waiting acks=-1 produce learns
        NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        return self.min_insync_replicas

    @property
    def is_under_replicated(self) -> bool:
        replication_factor = len(self.replicas) - len(self.adding_replicas)
        return self.is_leader and replication_factor - len(self.isr) > 0

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr

    @property
    def is_at_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) == self.effective_min_isr

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
        makeLeader). Returns True if this is a new leadership or a new leader epoch, or if the
        HW moved (a same-epoch state, e.g. from a new controller, may drop a pending ISR
        change): parked operations on the partition must then be re-checked, as Kafka's
        makeLeader does when the HW increments. A state with an older
        partition epoch than the one applied is ignored (False). On a new leader epoch the
        epoch is recorded as starting at the LEO (leader-epoch-checkpoint) and follower
        states are reset."""
        partition_epoch = _partition_epoch(state)
        if 0 <= partition_epoch < self.partition_epoch:
            log.info("%s-%d: skipped become-leader (partition epoch %d < %d)", self.topic,
                     self.partition, partition_epoch, self.partition_epoch)
            return False
        was_leader = self.is_leader
        new_epoch = state.leader_epoch > self.leader_epoch
        changed = not was_leader or state.leader_epoch != self.leader_epoch
        self._apply_state(state, topic_id, partition_epoch)
        self.leader_recovery_state = LEADER_RECOVERED  # KIP-704: the leader recovers at once
        now = self.time_ms()
        old = self.followers
        self.followers = {r: old.get(r) or FollowerState(r) for r in self.replicas
                          if r != self.local_broker_id}
        leo = self.log.log_end_offset
        if new_epoch or not was_leader:
            if state.leader_epoch >= 0:
                self.log.leader_epoch_cache.assign(state.leader_epoch, leo)
            self.leader_epoch_start_offset = leo
            for f in self.followers.values():
                f.reset(now, leo, not was_leader, f.broker_id in self.isr)
        self.leader_id = self.local_broker_id
        Partition.leadership_changes = next(CHANGE_STAMPS)
        hw_moved = self.maybe_increment_high_watermark(now)
        return changed or hw_moved

    def make_follower(self, state, topic_id: uuid.UUID | None = None) -> bool:
        """Apply a partition state naming another broker (or none) leader (Kafka's
        makeFollower). Returns True if the leader or its epoch changed (the replica fetcher
        must then restart from the log end offset and reconcile by epochs); a state with an
        older partition epoch is ignored (False)."""
        partition_epoch = _partition_epoch(state)
        if 0 <= partition_epoch < self.partition_epoch:
            log.info("%s-%d: skipped become-follower (partition epoch %d < %d)", self.topic,
                     self.partition, partition_epoch, self.partition_epoch)
            return False
        changed = self.leader_id != state.leader or state.leader_epoch != self.leader_epoch \
            or self.is_leader
        self._apply_state(state, topic_id, partition_epoch)
        self.leader_recovery_state = getattr(state, "leader_recovery_state", LEADER_RECOVERED)
        self.leader_epoch_start_offset = None
        self.followers = _NO_FOLLOWERS
        return changed

    def _apply_state(self, state, topic_id, partition_epoch: int) -> None:
        self.leader_id = state.leader
        Partition.leadership_changes = next(CHANGE_STAMPS)
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = partition_epoch
        self.controller_epoch = state.controller_epoch
        self.isr = shared_ids(state.isr)
        self.replicas = shared_ids(state.replicas)
        ids = getattr(state, "adding_replicas", None)
        self.adding_replicas = shared_ids(ids) if ids else ()
        ids = getattr(state, "removing_replicas", None)
        self.removing_replicas = shared_ids(ids) if ids else ()
        self.pending_isr = None
        if topic_id is not None:
            self.topic_id = topic_id
            self.log.topic_id = topic_id_text(topic_id)

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

    # --- append (leader) --------------------------------------------------------------------
    def append_records_to_leader(self, records, required_acks: int, origin: str = "client",
                                 verification_guard=None) -> tuple[LogAppendInfo, bool]:
        """Append as leader (Kafka's appendRecordsToLeader). Returns (info, hw_advanced).

        NOT_LEADER_OR_FOLLOWER when not the leader; NOT_ENOUGH_REPLICAS for acks=-1 when the
        ISR is smaller than the effective min.insync.replicas (nothing written); the log's
        errors otherwise.
        """
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.local_broker_id} is not the leader of "
                             f"{self.topic}-{self.partition}")
        if required_acks == -1 and len(self.isr) < self.effective_min_isr:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"The size of the current ISR {list(self.isr)} is insufficient "
                             f"to satisfy the min.isr requirement of {self.effective_min_isr} "
                             f"for partition {self.topic}-{self.partition}")
        if (self.timestamp_before_max_ms != LONG_MAX or self.timestamp_after_max_ms != LONG_MAX) \
                and not self.log.config.log_append_time:
            self._validate_timestamps(records)
        info = self.log.append_as_leader(records, self.leader_epoch, origin,
                                         verification_guard)
        if info.duplicate or info.valid_bytes == 0:
            # Kafka recomputes the HW after every append, a retried duplicate included: the
            # retry of a produce that timed out then completes once the HW can move, even if
            # the event that unblocked the HW moved nothing itself (nothing else recomputes
            # it once the producers only retry)
            return info, bool(self.followers) and self.maybe_increment_high_watermark()
        self.end_bytes += info.valid_bytes
        if not self.followers:  # replicas {self}: the HW follows the LEO at once
            self.log.high_watermark = self.log.log_end_offset
            self.hw_bytes = self.end_bytes
            return info, True
        self._note_pending_hw()
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

    # --- high watermark ---------------------------------------------------------------------
    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Leader: raise the HW to the smallest LEO among the maximal ISR and the caught-up
        followers that could join it (Kafka's maybeIncrementLeaderHW). True if it moved."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        if self.followers:
            leo = new_hw
            maximal = self.maximal_isr
            lag_ms = self.replica_lag_time_max_ms
            now = self.time_ms() if now_ms is None else now_ms
            for f in self.followers.values():
                if f.log_end_offset < new_hw and (
                        f.broker_id in maximal or (f.is_caught_up(leo, now, lag_ms)
                                                   and self.is_replica_isr_eligible(f.broker_id))):
                    new_hw = f.log_end_offset
        return self._advance_high_watermark(new_hw)

    def _advance_high_watermark(self, new_hw: int) -> bool:
        log = self.log
        if new_hw <= log.high_watermark:
            return False
        log.high_watermark = new_hw
        pending = self._pending_hw
        while pending and pending[0][0] <= new_hw:
            self.hw_bytes = pending.popleft()[1]
        if new_hw == log.log_end_offset:
            self.hw_bytes = self.end_bytes
            self._pending_hw = None
        return True

    def check_enough_replicas_reached_offset(self, required_offset: int
                                             ) -> tuple[bool, ErrorCode]:
        """DelayedProduce (acks=-1): (done, error). Done with NONE once HW >= required_offset
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is now below the effective
        min.insync.replicas); done with NOT_LEADER_OR_FOLLOWER if leadership moved."""
        if not self.is_leader or self.deleted:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if len(self.maximal_isr) < self.effective_min_isr:
                return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, ErrorCode.NONE
        return False, ErrorCode.NONE

    # --- follower fetches (leader side) -------------------------------------------------------
    def fetch_records_for_follower(self, replica_id: int, fetch_offset: int, max_bytes: int, *,
                                   current_leader_epoch: int = -1, last_fetched_epoch: int = -1,
                                   follower_log_start_offset: int = -1, broker_epoch: int = -1,
                                   min_one_message: bool = True) -> tuple[LogReadInfo, bool]:
        """A follower's fetch (Kafka's fetchRecords with a replica id): (read, hw_moved).

        Reads up to the LEO. With `last_fetched_epoch` >= 0 the follower's last epoch is
        checked first: if the leader's epoch history ends that epoch before `fetch_offset`
        (or knows only older epochs), the answer carries `diverging_epoch` and no records and
        the follower state is not updated (KIP-595). Otherwise the follower's LEO (=
        `fetch_offset`), log start, fetch time and broker epoch are recorded after the read,
        which may expand the ISR and move the HW. NOT_LEADER_OR_FOLLOWER (not the leader, or
        not a replica), FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, OFFSET_OUT_OF_RANGE
        (offset outside [log start, LEO], or an epoch the leader cannot place)."""
        self.check_leader_epoch(current_leader_epoch, True)
        follower = self.followers.get(replica_id)
        if follower is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of "
                             f"{self.topic}-{self.partition}")
        log = self.log
        hw = log.high_watermark
        leo = log.log_end_offset
        if last_fetched_epoch >= 0:
            epoch, end = log.leader_epoch_cache.end_offset_for_epoch(last_fetched_epoch, leo)
            if epoch < 0 or end < 0:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"{self.topic}-{self.partition}: cannot place last fetched "
                                 f"epoch {last_fetched_epoch} in the leader's epoch history")
            if epoch < last_fetched_epoch or end < fetch_offset:
                return LogReadInfo(FileRecords(), fetch_offset, hw, self.last_stable_offset,
                                   log.log_start_offset, leo,
                                   diverging_epoch=(epoch, end)), False
        data = log.read(fetch_offset, max_bytes, None, min_one_message)
        read = LogReadInfo(data.records, fetch_offset, hw, self.last_stable_offset,
                           log.log_start_offset, leo)
        return read, self.update_follower_fetch_state(replica_id, fetch_offset,
                                                      follower_log_start_offset, leo,
                                                      broker_epoch)

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    log_start_offset: int = -1, leader_leo: int | None = None,
                                    broker_epoch: int = -1) -> bool:
        """A follower fetched from `fetch_offset` (= its LEO) while the leader's LEO was
        `leader_leo` (default: now). Records it, maybe proposes an ISR expansion, and
        returns True if the HW advanced. NOT_LEADER_OR_FOLLOWER for a broker that is not a
        replica."""
        f = self.followers.get(replica_id)
        if f is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of "
                             f"{self.topic}-{self.partition}")
        now = self.time_ms()
        previous = f.log_end_offset
        f.update_fetch_state(fetch_offset, log_start_offset, now,
                             self.log.log_end_offset if leader_leo is None else leader_leo,
                             broker_epoch)
        self.maybe_expand_isr(f)
        if previous != fetch_offset:
            Partition.follower_end_changes = next(CHANGE_STAMPS)
            return self.maybe_increment_high_watermark(now)
        return False

    # --- follower side -----------------------------------------------------------------------
    def append_records_as_follower(self, records) -> LogAppendInfo:
        """Append batches fetched from the leader unchanged (offsets, epochs, producer ids,
        timestamps; Kafka's appendRecordsToFollowerOrFutureReplica). The log's errors.

        An empty log (LEO = log start) whose first fetched batch starts below its LEO and
        ends at or after it restarts at that batch's base offset: the leader's log start
        offset fell inside a batch (DeleteRecords) and a new or wiped replica fetched from
        it; the leader's log start offset, taken after this append, moves the start back."""
        try:
            info = self.log.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            plog = self.log
            leo = plog.log_end_offset
            if not (leo == plog.log_start_offset and e.first_offset < leo <= e.last_offset):
                raise
            log.info("%s-%d: first fetched batch starts at %d below the empty log's start %d; "
                     "restarting the log at %d", self.topic, self.partition, e.first_offset,
                     leo, e.first_offset)
            self.truncate_fully_and_start_at(e.first_offset)
            info = plog.append_as_follower(records)
        if info.valid_bytes:
            self.end_bytes += info.valid_bytes
            self._note_pending_hw()
        return info

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """Follower: HW = min(the leader's HW, own LEO), never backwards. True if it moved."""
        return self._advance_high_watermark(min(leader_high_watermark,
                                                self.log.log_end_offset))

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None:
        """Follower: follow the leader's log start offset (DeleteRecords, retention), never
        past the local HW."""
        target = min(leader_log_start_offset, self.log.high_watermark)
        if target > self.log.log_start_offset:
            self.log.delete_records_before(target)

    def truncate_to(self, offset: int) -> bool:
        """Follower: drop everything at or after `offset` (epoch cache and producer state
        included). Parked fetches see the byte counters go back. True if anything went."""
        before = self.log.size_in_bytes
        if not self.log.truncate_to(offset):
            return False
        self._after_truncation(before)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower far behind the leader's log start: empty the log and restart it at
        `offset`."""
        before = self.log.size_in_bytes
        self.log.truncate_fully_and_start_at(offset)
        self._after_truncation(before)

    def _after_truncation(self, size_before: int) -> None:
        removed = max(size_before - self.log.size_in_bytes, 0)
        self.end_bytes -= removed
        leo = self.log.log_end_offset
        pending = self._pending_hw
        if pending:
            kept = [(o, b) for o, b in pending if o <= leo]
            self._pending_hw = collections.deque(kept) if kept else None
        self.hw_bytes = self.end_bytes if self.log.high_watermark >= leo \
            else min(self.hw_bytes, self.end_bytes)

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
        tiered and -6 earliest pending upload (offset -1, epoch -1: what Kafka answers for a
        topic without remote storage), else the first offset with timestamp >= `timestamp` below the
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
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
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


def timestamp_bounds(configs: Mapping[str, str], default: tuple[int, int],
                      difference_ms: int | None) -> tuple[int, int]:
    """(before.max.ms, after.max.ms) from topic overrides over `default`; the deprecated
    message.timestamp.difference.max.ms bounds both when it is stricter (Kafka 3.6+)."""
    try:
        before = int(configs.get("message.timestamp.before.max.ms", default[0]))
        after = int(configs.get("message.timestamp.after.max.ms", default[1]))
        diff = configs.get("message.timestamp.difference.max.ms", difference_ms)
        diff = LONG_MAX if diff is None else int(diff)
    except (TypeError, ValueError):
        return default
    return min(before, diff), min(after, diff)


def _partition_epoch(state) -> int:
    """LeaderAndIsr carries partition_epoch, UpdateMetadata zk_version (-1 if neither)."""
    return getattr(state, "partition_epoch", getattr(state, "zk_version", -1))


#: the followers of a partition that has none (a follower, or a leader with no other
#: replica): one shared read-only mapping instead of an empty dict per partition
_NO_FOLLOWERS: Mapping[int, FollowerState] = MappingProxyType({})


def _always(_broker_id: int) -> bool:
    return True

