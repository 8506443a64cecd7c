"""`ReplicaManager`: the partitions this broker hosts, and the data path (Kafka's ReplicaManager).

Applies controller decisions (LeaderAndIsr -> `become_leader_or_follower`, StopReplica ->
`stop_replicas`, topic config changes), appends produced batches (`append_records`, Kafka's
appendRecords) and serves fetches (`fetch_messages`, Kafka's fetchMessages). Parks acks=-1
produces in the Produce purgatory (DelayedProduce) and fetches short of `min_bytes` in the
Fetch purgatory (DelayedFetch); both are woken through `TopicPartitionKey`s:

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
import uuid
from collections.abc import Callable, Iterable, Mapping

from broker.log_dir_failure import after_flushes, flush_failure
from broker.loop_slice import LoopSlice
from broker.metadata_cache import INTERNAL_TOPICS
from broker.partition import READ_COMMITTED, READ_UNCOMMITTED, Partition, timestamp_bounds
from broker.purgatory.delayed_fetch import (
    DelayedFetch,
    FetchParams,
    FetchPartitionData,
    FetchPartitionStatus,
    PartitionFetchInfo,
)
from broker.purgatory.delayed_operation import (
    DelayedOperationPurgatory,
    FetchSessionKey,
    TopicPartitionKey,
)
from broker.purgatory.delayed_produce import (
    DelayedProduce,
    ProducePartitionResult,
    ProducePartitionStatus,
)
from broker.purgatory.wakeups import PartitionWakeups
from broker.replication.fetcher import InitialFetchState
from broker.replication.quota import ReplicationQuotaManager, parse_throttled_partitions
from broker.replication.replica_selector import preferred_read_replica
from broker.request_channel import Deferred
from protocol.errors import ErrorCode, KafkaError
from storage.config import LogConfig

__all__ = ["ReplicaManager", "FetchParams", "PartitionFetchInfo", "FetchPartitionData",
           "ProducePartitionResult"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
LEADER_DURING_DELETE = -2
EPOCH_DURING_DELETE = -2
ZERO_UUID = uuid.UUID(int=0)
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
                self.maybe_shrink_isr()
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
        proposed = 0
        for p in list(self.partitions.values()):
            if not (p.followers and p.is_leader):
                continue
            if p.maybe_shrink_isr(now):
                proposed += 1
            elif p.maybe_increment_high_watermark(now):
                self._wake((p.topic, p.partition))
        return proposed

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

    # --- controller decisions ------------------------------------------------------------------
    def on_topic_config_change(self, topic: str, configs: Mapping[str, str]) -> None:
        """A topic's full set of config overrides (sent before its first LeaderAndIsr and on
        every change): rebuild its LogConfig over the broker defaults and apply it live."""
        try:
            cfg = LogConfig.from_props(dict(configs), base=self.log_manager.default_config)
        except KafkaError as e:
            log.warning("ignoring invalid config for topic %s: %s", topic, e)
            return
        self.topic_configs[topic] = cfg
        min_isr = configs.get("min.insync.replicas")
        try:
            self.topic_min_isr[topic] = int(min_isr) if min_isr is not None \
                else self.default_min_isr
        except ValueError:
            self.topic_min_isr[topic] = self.default_min_isr
        self.topic_timestamp_bounds[topic] = timestamp_bounds(
            configs, self.default_timestamp_bounds, None)
        self.leader_quota.mark_throttled(topic, parse_throttled_partitions(
            configs.get("leader.replication.throttled.replicas"), self.broker_id))
        self.follower_quota.mark_throttled(topic, parse_throttled_partitions(
            configs.get("follower.replication.throttled.replicas"), self.broker_id))
        for (t, _), p in self.partitions.items():
            if t == topic:
                p.log.config = cfg
                self._apply_topic_settings(p)

    def _apply_topic_settings(self, part: Partition) -> None:
        part.min_insync_replicas = self.topic_min_isr.get(part.topic, self.default_min_isr)
        part.timestamp_before_max_ms, part.timestamp_after_max_ms = \
            self.topic_timestamp_bounds.get(part.topic, self.default_timestamp_bounds)
        part.log.producer_state.verification_enabled = self.transaction_verification_enabled

    async def become_leader_or_follower(self, request) -> dict[TopicPartition, int]:
        """Apply a LeaderAndIsr decision (v7 shape, Kafka's becomeLeaderOrFollower). Creates
        or loads logs with the topic's LogConfig. Stale controller epoch ->
        KafkaError(STALE_CONTROLLER_EPOCH); a partition whose leader epoch is older than the
        one applied answers STALE_CONTROLLER_EPOCH, one whose replicas do not name this broker
        UNKNOWN_TOPIC_OR_PARTITION, one in a failed log dir (or, while a dir is offline, one
        without a log that is not new: its log may be there) or whose log cannot be created
        (any OSError: EMFILE, ENOSPC, ...) KAFKA_STORAGE_ERROR (KIP-112).
        Leaders: their replica fetchers stop, then they lead
        (Partition.make_leader). Followers (Kafka's makeFollowers): the partition stops taking
        client writes, its fetcher stops, parked operations complete, then a fetcher starts
        from the LEO (the HW when the log knows no leader epoch) and reconciles with the
        leader by epochs. FULL requests drop hosted partitions they do not list. Returns
        (topic, partition) -> error code."""
        self._check_controller_epoch(request.controller_epoch)
        await self._create_missing_logs(request)
        results: dict[TopicPartition, int] = {}
        listed: set[TopicPartition] = set()
        changed: list[TopicPartition] = []
        leaders: list[tuple[Partition, object, object]] = []
        followers: list[tuple[Partition, object, object]] = []
        slicer = LoopSlice()  # thousands of partitions: let other requests run meanwhile
        for ts in request.topic_states:
            topic = ts.topic_name
            topic_id = ts.topic_id if ts.topic_id not in (None, ZERO_UUID) else None
            for ps in ts.partition_states:
                await slicer.tick()
                tp = (topic, ps.partition_index)
                listed.add(tp)
                part = self.partitions.get(tp)
                if part is not None and ps.leader_epoch < part.leader_epoch:
                    results[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
                    continue
                if ps.replicas and self.broker_id not in ps.replicas:
                    log.warning("ignoring LeaderAndIsr for %s-%d: broker %d is not in its "
                                "replicas %s", topic, ps.partition_index, self.broker_id,
                                list(ps.replicas))
                    results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if part is None:
                    try:
                        part = self._create_partition(topic, ps.partition_index, topic_id,
                                                      ps.is_new)
                    except KafkaError as e:
                        results[tp] = e.code
                        continue
                    except OSError as e:  # not the log's (that is a KafkaError already)
                        log.error("could not create partition %s-%d: %s", topic,
                                  ps.partition_index, e)
                        results[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                        continue
                (leaders if ps.leader == self.broker_id else followers).append(
                    (part, ps, topic_id))
                results[tp] = ErrorCode.NONE
        fetchers = self.fetcher_manager
        if leaders and fetchers is not None:
            fetchers.remove_fetcher_for_partitions(
                [(p.topic, p.partition) for p, _, _ in leaders])
        for part, ps, topic_id in leaders:
            await slicer.tick()
            if part.make_leader(ps, topic_id):
                changed.append((part.topic, part.partition))
        new_followers = []
        for part, ps, topic_id in followers:
            await slicer.tick()
            if part.make_follower(ps, topic_id):
                new_followers.append(part)
        if new_followers:
            self._make_followers(new_followers)
            changed.extend((p.topic, p.partition) for p in new_followers)
        if getattr(request, "type", 0) == 2:  # TYPE_FULL: drop what the controller forgot
            for tp in [tp for tp in self.partitions if tp not in listed]:
                self._remove_partition(tp, delete=False, wake=False)
                changed.append(tp)
        self._wake_many(changed)
        if fetchers is not None:
            await fetchers.shutdown_idle_fetchers()
        return results

    async def _create_missing_logs(self, request) -> None:
        """Create the logs of new partitions off the event loop, in bulk (the disk's time
        for thousands of directories and files); one that fails is created again, and
        answered, by `_create_partition`."""
        lm = self.log_manager
        create_logs = getattr(lm, "create_logs", None)
        channel = getattr(lm, "failure_channel", None)
        degraded = channel is not None and channel.has_offline_dirs()
        specs = []
        for ts in request.topic_states:
            topic_id = ts.topic_id if ts.topic_id not in (None, ZERO_UUID) else None
            for ps in ts.partition_states:
                tp = (ts.topic_name, ps.partition_index)
                if tp in self.partitions or tp in self.offline_partitions or \
                        (degraded and not ps.is_new):  # its log may be in the failed dir
                    continue
                if not ps.replicas or self.broker_id in ps.replicas:
                    specs.append((tp, self.log_config_for(tp[0]),
                                  None if topic_id is None else str(topic_id)))
        if create_logs is not None and len(specs) > 1:
            await create_logs(specs)

    def _make_followers(self, parts: list[Partition]) -> None:
        """Restart the fetchers of partitions whose leader or leader epoch changed."""
        fetchers = self.fetcher_manager
        if fetchers is None:
            return
        fetchers.remove_fetcher_for_partitions([(p.topic, p.partition) for p in parts])
        if self._shutdown:
            return
        initial = {}
        for p in parts:
            if p.leader_id < 0:
                continue  # no leader yet: nothing to fetch from
            plog = p.log
            offset = plog.log_end_offset \
                if self.truncate_on_fetch and plog.leader_epoch_cache.latest_epoch >= 0 \
                else plog.high_watermark
            initial[(p.topic, p.partition)] = InitialFetchState(p.topic_id, p.leader_id,
                                                                p.leader_epoch, offset)
        if initial:
            fetchers.add_fetcher_for_partitions(initial)

    def _check_controller_epoch(self, epoch: int) -> None:
        """STALE_CONTROLLER_EPOCH for a decision from an older controller; else remember it."""
        if epoch < self.controller_epoch:
            raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH,
                             f"controller epoch {epoch} < {self.controller_epoch}")
        self.controller_epoch = epoch

    def _create_partition(self, topic: str, index: int, topic_id, is_new: bool = True
                          ) -> Partition:
        tp = (topic, index)
        lm = self.log_manager
        if tp in self.offline_partitions or (not is_new and lm.get_log(tp) is None
                                             and lm.failure_channel.has_offline_dirs()):
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{index}: log dir offline")
        config = self.log_config_for(topic)
        plog = self.log_manager.get_or_create_log(
            tp, config, str(topic_id) if topic_id is not None else None)
        part = Partition(topic, index, self.broker_id, plog, topic_id, self.time_ms)
        self._apply_topic_settings(part)
        part.replica_lag_time_max_ms = self.replica_lag_time_max_ms
        if self.alter_partition_manager is not None:
            part.alter_partition = self._submit_alter_partition
        part.is_replica_isr_eligible = self._is_broker_alive
        part.on_delayed_wake = functools.partial(self._wake, tp)
        self.partitions[tp] = part
        return part

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

    async def stop_replicas(self, request) -> dict[TopicPartition, int]:
        """Apply a StopReplica decision (v4 shape): stop hosting each partition; delete its
        log when `delete_partition` (or leader epoch -2). Parked operations on it complete
        (UNKNOWN_TOPIC_OR_PARTITION). Stale controller epoch -> STALE_CONTROLLER_EPOCH."""
        self._check_controller_epoch(request.controller_epoch)
        results: dict[TopicPartition, int] = {}
        for ts in request.topic_states:
            for ps in ts.partition_states:
                tp = (ts.topic_name, ps.partition_index)
                delete = bool(ps.delete_partition) or ps.leader_epoch == EPOCH_DURING_DELETE
                part = self.partitions.get(tp)
                if part is not None and ps.leader_epoch >= 0 and \
                        ps.leader_epoch < part.leader_epoch:
                    results[tp] = ErrorCode.FENCED_LEADER_EPOCH
                    continue
                if tp in self.offline_partitions:
                    results[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
                self._remove_partition(tp, delete, wake=False)
                results[tp] = ErrorCode.NONE
        self._wake_many(results)
        return results

    def partitions_deleted(self, tps: Iterable[TopicPartition]) -> None:
        """UpdateMetadata removed these partitions (topic deletion in progress): complete the
        operations parked on them. Logs are deleted by the StopReplica that follows."""
        keys = []
        for tp in tps:
            part = self.partitions.get(tuple(tp))
            if part is not None:
                part.leader_id = -1
            keys.append(tuple(tp))
        self._wake_many(keys)

    def _remove_partition(self, tp: TopicPartition, delete: bool, wake: bool = True) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([tp])
        part = self.partitions.pop(tp, None)
        if part is not None:
            part.deleted = True
        if delete:
            self.log_manager.delete_log(tp)
        if wake:
            self._wake(tp)

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

    # --- fetch ---------------------------------------------------------------------------------
    def read_from_local_log(self, params: FetchParams,
                            fetch_infos: list[tuple[TopicPartition, PartitionFetchInfo]]
                            ) -> dict[TopicPartition, FetchPartitionData]:
        """Read every partition once (Kafka's readFromLocalLog). `params.max_bytes` bounds the
        response; each partition reads at most min(its max_bytes, what is left); the first
        partition with data may exceed both by one batch (KIP-74) unless
        `hard_max_bytes_limit` (Fetch v0-v2). Follower fetches update the follower state
        (and may move the HW) first."""
        limit = params.max_bytes
        min_one = not params.hard_max_bytes_limit
        follower = params.replica_id >= 0
        out: dict[TopicPartition, FetchPartitionData] = {}
        hw_moved: list[TopicPartition] = []
        for tp, info in fetch_infos:
            diverging = None
            try:
                part = self.partitions.get(tp)
                if part is None:
                    part = self.get_partition_or_error(*tp)
                if follower:
                    read, moved = part.fetch_records_for_follower(
                        params.replica_id, info.fetch_offset, min(info.max_bytes, limit),
                        current_leader_epoch=info.current_leader_epoch,
                        last_fetched_epoch=info.last_fetched_epoch,
                        follower_log_start_offset=info.log_start_offset,
                        broker_epoch=params.replica_epoch, min_one_message=min_one)
                    if moved:
                        hw_moved.append(tp)
                    diverging = read.diverging_epoch
                    if self._leader_throttled(part, params.replica_id):
                        read.records = b""
                    elif read.records and self.leader_quota.is_throttled(*tp):
                        self.leader_quota.record(len(read.records))
                else:
                    if params.rack_id and self.replica_selector is not None and \
                            part.is_leader and part.followers:
                        preferred = preferred_read_replica(self, part, info.fetch_offset,
                                                           params.rack_id)
                        if preferred is not None:
                            out[tp] = FetchPartitionData(
                                ErrorCode.NONE, part.high_watermark, part.last_stable_offset,
                                part.log_start_offset, b"", preferred_read_replica=preferred)
                            continue
                    read = part.read_records(
                        info.fetch_offset, min(info.max_bytes, limit),
                        current_leader_epoch=info.current_leader_epoch,
                        fetch_only_from_leader=params.fetch_only_from_leader,
                        is_follower=False, isolation_level=params.isolation_level,
                        min_one_message=min_one)
            except KafkaError as e:
                out[tp] = FetchPartitionData(e.code, error_message=e.message)
                continue
            except OSError as e:
                e = self.storage_error(tp, "read", e)
                out[tp] = FetchPartitionData(e.code, error_message=e.message)
                continue
            except Exception as e:  # noqa: BLE001
                log.exception("read of %s-%d failed", tp[0], tp[1])
                out[tp] = FetchPartitionData(ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(e))
                continue
            size = len(read.records)
            if size:
                min_one = False
                limit = max(0, limit - size)
            if follower:
                end, end_bytes = read.log_end_offset, part.end_bytes
            else:
                end = read.last_stable_offset if params.isolation_level == READ_COMMITTED \
                    else read.high_watermark
                end_bytes = part.hw_bytes
            out[tp] = FetchPartitionData(ErrorCode.NONE, read.high_watermark,
                                         read.last_stable_offset, read.log_start_offset,
                                         read.records, diverging_epoch=diverging,
                                         aborted_transactions=read.aborted_transactions,
                                         end_offset=end, end_bytes=end_bytes, partition=part)
        self._wake_many(hw_moved)
        return out

    def _leader_throttled(self, part: Partition, replica_id: int) -> bool:
        """KIP-73 on the leader: a throttled partition's out-of-sync follower gets no data
        while the leader replication rate is above leader.replication.throttled.rate."""
        quota = self.leader_quota
        return quota.is_throttled(part.topic, part.partition) and \
            replica_id not in part.isr and quota.is_quota_exceeded()

    def _read_for_delayed_fetch(self, params: FetchParams,
                                fetch_infos: list[tuple[TopicPartition, PartitionFetchInfo]]
                                ) -> dict[TopicPartition, FetchPartitionData]:
        """A DelayedFetch's re-read: `read_from_local_log`, never raising (an unexpected
        failure answers UNKNOWN_SERVER_ERROR for every partition, logged)."""
        try:
            return self.read_from_local_log(params, fetch_infos)
        except Exception as e:  # noqa: BLE001 - must not lose the client's answer
            log.exception("delayed fetch read failed")
            return {tp: FetchPartitionData(ErrorCode.UNKNOWN_SERVER_ERROR,
                                           error_message=str(e)) for tp, _ in fetch_infos}

    def fetch_messages(self, params: FetchParams,
                       fetch_infos: list[tuple[TopicPartition, PartitionFetchInfo]],
                       session=None, then: Callable[[dict], object] | None = None):
        """Kafka's fetchMessages: answer at once if `max_wait_ms` <= 0, nothing was asked,
        some partition failed, or at least `min_bytes` were found; else park a DelayedFetch
        (completed by appends / HW moves / leader changes / deletion / `max_wait_ms`) and
        return a Future of the same dict. `session`: the incremental fetch session whose
        changed partitions `fetch_infos` are; parked, the fetch watches the whole session
        (FetchSessionKey), so an empty `fetch_infos` waits too. `then(results)`: returned
        instead of the results (or set on the Future; its exception too), which spares the
        caller a Future of its own. The Future is a `broker.request_channel.Deferred`: the
        response leaves in the callback that completes the fetch (no loop turn later)."""
        results = self.read_from_local_log(params, fetch_infos)
        if params.max_wait_ms <= 0 or self._shutdown or (not fetch_infos and session is None):
            return results if then is None else then(results)
        total = 0
        for r in results.values():
            if r.error != ErrorCode.NONE or r.preferred_read_replica >= 0:
                return results if then is None else then(results)
            total += len(r.records)
        if total >= params.min_bytes:
            return results if then is None else then(results)
        follower = params.replica_id >= 0
        statuses = []
        for (tp, info) in fetch_infos:
            part = self.partitions[tp]
            counter = part.end_bytes if follower else part.hw_bytes
            statuses.append(FetchPartitionStatus(tp[0], tp[1], info, part,
                                                 counter - len(results[tp].records)))
        fut = Deferred()  # answered the moment the fetch completes, no loop turn later

        def done(res: dict) -> None:
            if fut.done():
                return
            if then is None:
                fut.set_result(res)
                return
            try:
                fut.set_result(then(res))
            except Exception as e:  # noqa: BLE001 - the caller's error, on its Future
                fut.set_exception(e)

        op = DelayedFetch(max(int(params.max_wait_ms), 0), params, statuses, list(fetch_infos),
                          self.get_partition, self._delayed_fetch_read, done, session)
        # just read and found short: park without trying again (nothing ran meanwhile)
        self.delayed_fetch_purgatory.watch(
            op, (FetchSessionKey(session.id),) if session is not None else
            tuple({TopicPartitionKey(*tp): None for tp, _ in fetch_infos}))
        return fut


def default_fetch_params(**kw) -> FetchParams:
    """FetchParams with Kafka's consumer defaults (read_uncommitted), for tools and tests."""
    kw.setdefault("isolation_level", READ_UNCOMMITTED)
    return FetchParams(**kw)
