"""`ReplicaManager`: the partitions this broker hosts, and the data path (Kafka's ReplicaManager).

Applies controller decisions (LeaderAndIsr -> `become_leader_or_follower`, StopReplica ->
`stop_replicas`, topic config changes; in `broker.replica_state_changes`), appends produced
batches (`append_records`, Kafka's appendRecords) and serves fetches (`fetch_messages`,
Kafka's fetchMessages; in `broker.replica_fetch`). The handlers call all of them as
ReplicaManager methods: the two modules' functions are bound into the class (no call
layer). Parks acks=-1 produces in the Produce purgatory (DelayedProduce) and fetches short
of `min_bytes` in the Fetch purgatory (DelayedFetch); both are woken through
`TopicPartitionKey`s:

- after an append: Fetch (followers read to the LEO; consumers when the HW moved) and
  Produce (when the HW moved);
- after a follower fetch moved the HW: Produce and Fetch;
- on a leader change, a StopReplica or a deletion: both (the operations answer with the
  partition's new error).

Everything runs on the event loop; no disk flush happens here (the LogManager flushes in its
executor). When an append reaches `flush.messages` the answer waits for that fsync (Kafka
fsyncs inside the append); a failed fsync answers KAFKA_STORAGE_ERROR for its partition.
An I/O error takes the partition's log dir offline (KIP-112, `broker.log_dir_failure`): its
partitions move to `offline_partitions` and answer KAFKA_STORAGE_ERROR from then on.
Results are `ProducePartitionResult` / `FetchPartitionData` keyed by (topic, partition); when
an operation parks or waits for an fsync, an `asyncio.Future` of that dict is returned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from broker import replica_fetch, replica_state_changes
from broker.log_dir_failure import after_flushes, flush_failure
from broker.metadata_cache import INTERNAL_TOPICS
from broker.partition import READ_UNCOMMITTED, Partition, timestamp_bounds
from broker.purgatory.delayed_fetch import (
    FetchParams,
    FetchPartitionData,
    PartitionFetchInfo,
)
from broker.purgatory.delayed_operation import (
    DelayedOperationPurgatory,
    TopicPartitionKey,
)
from broker.purgatory.delayed_produce import (
    DelayedProduce,
    ProducePartitionResult,
    ProducePartitionStatus,
)
from broker.purgatory.wakeups import PartitionWakeups
from broker.replication.quota import ReplicationQuotaManager
from common.loop_slice import LoopSlice
from protocol.errors import ErrorCode, KafkaError
from storage.config import LogConfig
from storage.log import Log
from storage.log_transactions import CHANGE_STAMPS

__all__ = ["ReplicaManager", "FetchParams", "PartitionFetchInfo", "FetchPartitionData",
           "ProducePartitionResult"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
LONG_MAX = (1 << 63) - 1


def _now_ms() -> int:
    return int(time.time() * 1000)


def _config_value(config, name: str, default):
    if config is None:
        return default
    try:
        value = config.get(name)
    except (KeyError, AttributeError):
        return default
    return default if value is None else value


class ReplicaManager:
    """See the module docstring. `config` is the broker's KafkaConfig (None in tests: Kafka
    defaults), `timer` the purgatories' Timer, `time_ms` the wall clock in ms."""

    def __init__(self, config, broker_id: int, log_manager, metadata_cache, timer,
                 time_ms: Callable[[], int] = _now_ms) -> None:
        self.config = config
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.timer = timer
        self.time_ms = time_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        #: a fresh stamp whenever a Partition is added to or removed from `partitions`
        self.partitions_version = 0
        self._led: list[Partition] = []
        self._led_key: tuple[int, int] | None = None
        self._all_quiet_at: tuple | None = None  # see maybe_shrink_isr_sliced
        self.offline_partitions: set[TopicPartition] = set()  # in a failed log dir
        self.topic_configs: dict[str, LogConfig] = {}
        self.topic_min_isr: dict[str, int] = {}
        self.default_min_isr = int(_config_value(config, "min.insync.replicas", 1))
        self.topic_timestamp_bounds: dict[str, tuple[int, int]] = {}
        self.default_timestamp_bounds = timestamp_bounds({}, (
            int(_config_value(config, "log.message.timestamp.before.max.ms", LONG_MAX)),
            int(_config_value(config, "log.message.timestamp.after.max.ms", LONG_MAX))),
            int(_config_value(config, "log.message.timestamp.difference.max.ms", LONG_MAX)))
        purge = int(_config_value(config, "fetch.purgatory.purge.interval.requests", 1000))
        self.delayed_fetch_purgatory = DelayedOperationPurgatory("Fetch", timer, max(purge, 1))
        purge = int(_config_value(config, "producer.purgatory.purge.interval.requests", 1000))
        self.delayed_produce_purgatory = DelayedOperationPurgatory("Produce", timer,
                                                                   max(purge, 1))
        # KIP-890: transactional batches starting a transaction need a verification guard
        self.transaction_verification_enabled = bool(_config_value(
            config, "transaction.partition.verification.enable", True))
        self.controller_epoch = -1
        self.expired_fetches = 0
        self._shutdown = False
        # --- replication (issue 12) ---
        self.replica_lag_time_max_ms = int(_config_value(config, "replica.lag.time.max.ms",
                                                         30000))
        self.alter_partition_manager = None  # AlterPartitionManager, set by the server
        self.fetcher_manager = None  # ReplicaFetcherManager, set by the server
        self.truncate_on_fetch = True  # inter.broker.protocol.version >= 2.7
        self.broker_epoch_supplier: Callable[[], int] = lambda: -1
        window_num = int(_config_value(config, "replication.quota.window.num", 11))
        window_s = float(_config_value(config, "replication.quota.window.size.seconds", 1))
        self.leader_quota = ReplicationQuotaManager(
            int(_config_value(config, "leader.replication.throttled.rate", LONG_MAX)),
            window_num, window_s)
        self.follower_quota = ReplicationQuotaManager(
            int(_config_value(config, "follower.replication.throttled.rate", LONG_MAX)),
            window_num, window_s)
        self._isr_task: asyncio.Task | None = None
        self.replica_selector = None  # KIP-392 (broker.replication.replica_selector)
        # bound once: every parked fetch gets the same callable (one allocation fewer per
        # DelayedFetch, so the cyclic GC runs less often under many parked fetches)
        self._delayed_fetch_read = self._read_for_delayed_fetch
        # issue 21: the KIP-227 session cache the fetch handler uses (set by the server) and
        # the per-turn wakeups of sessions and purgatories after a partition changed
        self.fetch_session_cache = None
        self.wakeups = PartitionWakeups(self.delayed_fetch_purgatory,
                                        self.delayed_produce_purgatory,
                                        lambda: self.fetch_session_cache)

    # --- lifecycle ---------------------------------------------------------------------------
    async def startup(self) -> None:
        """Start the ISR expiration task (every replica.lag.time.max.ms / 2, Kafka's
        "isr-expiration"), which proposes ISR shrinks for led partitions."""
        if self._isr_task is None:
            self._isr_task = asyncio.create_task(self._isr_expiration(), name="isr-expiration")

    async def shutdown(self) -> None:
        """Stop the replica fetchers, the ISR task and the AlterPartition sender, then shut
        both purgatories (parked requests are dropped: their connections close with the
        server); the LogManager closes the logs."""
        self._shutdown = True
        task, self._isr_task = self._isr_task, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1)
        if self.fetcher_manager is not None:
            await self.fetcher_manager.shutdown()
        if self.alter_partition_manager is not None:
            await self.alter_partition_manager.shutdown()
        self.wakeups.closed = True
        self.delayed_fetch_purgatory.shutdown()
        self.delayed_produce_purgatory.shutdown()

    async def stop_fetchers(self) -> None:
        """After a successful controlled shutdown (this broker left every ISR): stop fetching
        now, or leaders keep proposing it for ISRs the controller refuses."""
        self._shutdown = True
        if self.fetcher_manager is not None:
            await self.fetcher_manager.shutdown()

    async def _isr_expiration(self) -> None:
        interval = max(self.replica_lag_time_max_ms / 2, 10) / 1000
        while not self._shutdown:
            await asyncio.sleep(interval)
            try:
                await self.maybe_shrink_isr_sliced()
            except Exception:  # noqa: BLE001 - the task must keep running
                log.exception("ISR expiration failed")

    def maybe_shrink_isr(self) -> int:
        """Propose ISR shrinks for every led partition with out-of-sync followers; returns
        how many were proposed. The other led partitions get their HW recomputed: a
        follower outside the ISR holds the HW only while it counts as caught up (within
        replica.lag.time.max.ms) and its broker is alive, conditions that lapse with time or
        metadata and move no offset, so no fetch or append would recompute it; parked
        acks=-1 produces then complete here instead of timing out."""
        now = self.time_ms()
        return sum(self._expire_isr(p, now) for p in list(self.partitions.values()))

    async def maybe_shrink_isr_sliced(self) -> int:
        """`maybe_shrink_isr` giving way to other work every few ms (the periodic task: tens
        of thousands of led partitions must not hold the loop for a second). Skipped while
        `_quiet_stamp` stays what it was when a whole pass found every led partition quiet
        (`_quiet_leader`): a quiet partition stays quiet until an append, a high watermark,
        a follower's log end offset, a leadership, a log start, a log or a hosted
        Partition changes, and each of those moves the stamp."""
        stamp = self._quiet_stamp()
        if stamp == self._all_quiet_at:
            return 0
        now = self.time_ms()
        slicer = LoopSlice()
        proposed = 0
        all_quiet = True
        for n, p in enumerate(self.led_partitions()):
            if not n & 63:
                await slicer.tick()
            if not _quiet_leader(p):
                all_quiet = False
                proposed += self._expire_isr(p, now)
        self._all_quiet_at = stamp if all_quiet else None
        return proposed

    def _quiet_stamp(self) -> tuple:
        return (self.partitions_version, Partition.leadership_changes,
                Partition.follower_end_changes, Log.end_changes(), Log.offset_changes(),
                Log.high_watermark_changes(), self.log_manager.logs_version)

    def led_partitions(self) -> list[Partition]:
        """The hosted partitions led here (possibly including some deleted or no longer led
        since: callers check), listed again only after a Partition came or went or a
        leadership changed (the ISR expiration of an idle broker of 30,000 partitions
        looked at every hosted one, issue 22)."""
        key = (self.partitions_version, Partition.leadership_changes)
        if self._led_key != key:
            me = self.broker_id
            self._led = [p for p in self.partitions.values() if p.leader_id == me]
            self._led_key = key
        return self._led

    def _expire_isr(self, p: Partition, now: int) -> int:
        if not (p.followers and p.is_leader) or p.deleted:
            return 0
        if p.maybe_shrink_isr(now):
            return 1
        if p.maybe_increment_high_watermark(now):
            self._wake((p.topic, p.partition))
        return 0

    def partitions_changed(self) -> None:
        """Called after a Partition was added to or removed from `partitions`."""
        self.partitions_version = next(CHANGE_STAMPS)

    def replica_change_stamp(self) -> tuple[int, int, int]:
        """Equal values mean that since the first reading no hosted Partition was added or
        removed, no log was added, replaced or removed and no log start offset (nor recovery
        point) moved: the fetch sessions' periodic log-start sweeps (leader and follower side)
        are skipped while it stays put (an idle broker of 30,000 partitions swept them all
        every 30 s, issue 22)."""
        return (self.partitions_version, Log.offset_changes(),
                self.log_manager.logs_version)

    def broker_epoch(self) -> int:
        """This broker's epoch (ZooKeeper: czxid of its registration), -1 if unknown."""
        return self.broker_epoch_supplier()

    # --- lookups ------------------------------------------------------------------------------
    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def get_partition_or_error(self, topic: str, partition: int) -> Partition:
        """The hosted partition, or KafkaError: KAFKA_STORAGE_ERROR (in a failed log dir),
        NOT_LEADER_OR_FOLLOWER (in the metadata: another broker hosts it), else
        UNKNOWN_TOPIC_OR_PARTITION."""
        p = self.partitions.get((topic, partition))
        if p is not None:
            return p
        if (topic, partition) in self.offline_partitions:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{topic}-{partition} is in an offline log dir")
        cache = self.metadata_cache
        if cache is not None and cache.contains_partition(topic, partition):
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.broker_id} does not host {topic}-{partition}")
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"unknown topic or partition {topic}-{partition}")

    def log_config_for(self, topic: str) -> LogConfig:
        cfg = self.topic_configs.get(topic)
        return cfg if cfg is not None else self.log_manager.default_config

    # --- controller decisions (broker.replica_state_changes) --------------------------------
    on_topic_config_change = replica_state_changes.on_topic_config_change
    become_leader_or_follower = replica_state_changes.become_leader_or_follower
    stop_replicas = replica_state_changes.stop_replicas
    partitions_deleted = replica_state_changes.partitions_deleted

    def _submit_alter_partition(self, part: Partition, leader_and_isr) -> asyncio.Future:
        return self.alter_partition_manager.submit(part.topic, part.topic_id, part.partition,
                                                   leader_and_isr, part.controller_epoch)

    def _is_broker_alive(self, broker_id: int) -> bool:
        """ZooKeeper mode's ISR eligibility: the broker is registered (metadata cache)."""
        is_alive = getattr(self.metadata_cache, "is_alive", None)
        return True if is_alive is None else bool(is_alive(broker_id))

    def storage_error(self, tp: TopicPartition, what: str, exc: OSError) -> KafkaError:
        """KAFKA_STORAGE_ERROR for an I/O error on `tp`'s log; its log dir goes offline."""
        return self.log_manager.io_error(self.log_manager.log_dir_of(tp),
                                         f"{what} of {tp[0]}-{tp[1]}", exc)

    def on_follower_progress(self, tp: TopicPartition, hw_moved: bool) -> None:
        """A replica fetcher appended to / truncated a follower partition: parked consumer
        fetches on it (KIP-392) may complete (at the end of this loop turn)."""
        self.wakeups.note(tp)

    def _wake(self, tp: TopicPartition) -> None:
        """Fetches and acks=-1 produces parked on `tp` re-check, at the end of this turn."""
        self.wakeups.note(tp, True)

    def _wake_many(self, tps: Iterable[TopicPartition]) -> None:
        """`_wake` for many partitions; the end-of-turn flush tries each parked operation
        once for a large batch (`PartitionWakeups`)."""
        note = self.wakeups.note
        for tp in tps:
            note(tuple(tp), True)

    # --- produce -------------------------------------------------------------------------------
    def append_records(self, timeout_ms: int, required_acks: int,
                       entries: Mapping[TopicPartition, object], origin: str = "client",
                       verification_guards: Mapping[TopicPartition, object] | None = None,
                       ) -> dict[TopicPartition, ProducePartitionResult] | asyncio.Future:
        """Append each partition's records (a writable memoryview is patched in place, not
        copied) as leader. Per-partition errors go into the results (never raised):
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS and the log's
        (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD,
        INVALID_TIMESTAMP, INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, ...).
        A duplicate idempotent batch answers NONE with its original offsets. A client
        (`origin="client"`) may not append to an internal topic: INVALID_TOPIC_EXCEPTION.
        `verification_guards`: KIP-890 guards by partition (transactional produce, see
        `broker.coordinator.transaction.verification`).

        `required_acks` not in {-1, 0, 1} -> every partition INVALID_REQUIRED_ACKS, nothing
        appended. acks=-1: returns a Future when some partition waits for its HW (a
        DelayedProduce for `timeout_ms`), else the dict at once. acks=1/-1: also a Future
        when an append reached `flush.messages` (`LogAppendInfo.flush_future`), done only
        after that fsync ran (Kafka fsyncs inside the append); a failed fsync, or any OSError
        in the append itself, answers KAFKA_STORAGE_ERROR for that partition."""
        if required_acks not in (-1, 0, 1):
            return {tp: ProducePartitionResult(ErrorCode.INVALID_REQUIRED_ACKS,
                                               error_message=f"acks {required_acks}")
                    for tp in entries}
        results: dict[TopicPartition, ProducePartitionResult] = {}
        note = self.wakeups.note
        flushes = None  # tp -> flush_future, only when some append reached flush.messages
        for tp, records in entries.items():
            if origin == "client" and tp[0] in INTERNAL_TOPICS:
                results[tp] = ProducePartitionResult(  # Kafka's ReplicaManager.appendToLocalLog
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    error_message=f"Cannot append to internal topic {tp[0]}")
                continue
            part = self.partitions.get(tp)
            try:
                if part is None:
                    part = self.get_partition_or_error(*tp)
                info, hw_moved = part.append_records_to_leader(
                    records, required_acks, origin,
                    verification_guards.get(tp) if verification_guards else None)
            except KafkaError as e:
                results[tp] = ProducePartitionResult(
                    e.code, error_message=e.message,
                    record_errors=getattr(e, "record_errors", ()))
                continue
            except OSError as e:  # Kafka: IOException in the log -> KafkaStorageException
                err = self.storage_error(tp, "append", e)
                results[tp] = ProducePartitionResult(err.code, error_message=err.message)
                continue
            except Exception as e:  # noqa: BLE001 - one partition's failure is its own
                log.exception("append to %s-%d failed", tp[0], tp[1])
                results[tp] = ProducePartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                     error_message=str(e))
                continue
            results[tp] = ProducePartitionResult(ErrorCode.NONE, info.first_offset,
                                                 info.last_offset, info.log_append_time,
                                                 part.log.log_start_offset)
            if info.flush_future is not None:
                if flushes is None:
                    flushes = {}
                flushes[tp] = info.flush_future
            if hw_moved or part.followers:  # fetchers and sessions, once per loop turn
                note(tp, hw_moved)
        out = results if required_acks != -1 else self._maybe_delay_produce(timeout_ms, results)
        if flushes is None:
            return out
        if required_acks == 0:  # no answer to hold back; still report a failed fsync
            for tp, f in flushes.items():
                asyncio.ensure_future(f).add_done_callback(
                    functools.partial(flush_failure, tp))
            return out
        return after_flushes(flushes, out)

    def _maybe_delay_produce(self, timeout_ms: int, results: dict):
        waiting = False
        for tp, r in results.items():
            if r.error == ErrorCode.NONE:
                part = self.partitions.get(tp)
                if part is None or part.high_watermark <= r.last_offset or \
                        len(part.isr) < part.min_insync_replicas:
                    waiting = True
                    break
        if not waiting:
            return results
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def done(res: dict) -> None:
            if not fut.done():
                fut.set_result(res)

        op = DelayedProduce(
            max(int(timeout_ms), 0),
            {tp: ProducePartitionStatus(r.last_offset + 1, r) for tp, r in results.items()},
            self.get_partition, done)
        keys = [TopicPartitionKey(*tp) for tp in results]
        self.delayed_produce_purgatory.try_complete_else_watch(op, keys)
        if fut.done():
            return fut.result()
        return fut

    # --- fetch (broker.replica_fetch) ----------------------------------------------------------
    read_from_local_log = replica_fetch.read_from_local_log
    _read_for_delayed_fetch = replica_fetch.read_for_delayed_fetch
    fetch_messages = replica_fetch.fetch_messages


def default_fetch_params(**kw) -> FetchParams:
    """FetchParams with Kafka's consumer defaults (read_uncommitted), for tools and tests."""
    kw.setdefault("isolation_level", READ_UNCOMMITTED)
    return FetchParams(**kw)


def _quiet_leader(p: Partition) -> bool:
    """True when the ISR expiration has nothing to do for `p` (an idle led partition, or one
    not led here): every follower is at the leader's log end offset and so is the high
    watermark. Then no ISR member is out of sync (`FollowerState.is_caught_up`: equal LEOs)
    and the HW cannot move, so skipping `_expire_isr` changes nothing; an idle broker's scan
    of tens of thousands of partitions costs a few attribute reads each (issue 22)."""
    followers = p.followers
    local = p.local_broker_id
    if not followers or p.leader_id != local or p.deleted:
        return True
    log = p.log
    leo = log.log_end_offset
    if log.high_watermark != leo:
        return False
    for f in followers.values():
        if f.log_end_offset != leo:
            return False
    for r in p.isr:
        if r != local and r not in followers:
            return False
    return True
