"""The controller's decisions applied to the partitions a broker hosts: LeaderAndIsr
(`become_leader_or_follower`, Kafka's becomeLeaderOrFollower / makeLeaders / makeFollowers),
StopReplica (`stop_replicas`), topic config changes (`on_topic_config_change`) and deletions
seen in UpdateMetadata (`partitions_deleted`).

Functions over the broker's `broker.replica_manager.ReplicaManager` (`rm`), which binds the
public ones as its methods (the handlers call them there). They create and drop `Partition`s
(logs through the LogManager), start and stop replica fetchers, and wake the operations
parked on a changed partition at the end of the loop turn (`rm._wake_many`). Error codes per
partition: STALE_CONTROLLER_EPOCH, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION,
KAFKA_STORAGE_ERROR (KIP-112), as each function documents.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping

from broker.partition import Partition, timestamp_bounds
from broker.replication.fetcher import InitialFetchState
from broker.replication.quota import parse_throttled_partitions
from common.loop_slice import LoopSlice
from protocol.errors import ErrorCode, KafkaError
from storage.config import LogConfig

__all__ = ["become_leader_or_follower", "on_topic_config_change", "partitions_deleted",
           "stop_replicas"]

log = logging.getLogger("broker.replica_manager")

TopicPartition = tuple[str, int]
EPOCH_DURING_DELETE = -2  # StopReplica's leader epoch for a partition being deleted
ZERO_UUID = uuid.UUID(int=0)
#: partitions between two looks at the clock (`LoopSlice.tick`) in the per-partition loops
SLICE_EVERY = 64
#: partitions per fetcher change / wakeup batch between two such looks
CHUNK = 1024


def on_topic_config_change(rm, topic: str, configs: Mapping[str, str]) -> None:
    """A topic's full set of config overrides (sent before its first LeaderAndIsr and on
    every change): rebuild its LogConfig over the broker defaults and apply it live."""
    try:
        cfg = LogConfig.from_props(dict(configs), base=rm.log_manager.default_config)
    except KafkaError as e:
        log.warning("ignoring invalid config for topic %s: %s", topic, e)
        return
    rm.topic_configs[topic] = cfg
    min_isr = configs.get("min.insync.replicas")
    try:
        rm.topic_min_isr[topic] = int(min_isr) if min_isr is not None \
            else rm.default_min_isr
    except ValueError:
        rm.topic_min_isr[topic] = rm.default_min_isr
    rm.topic_timestamp_bounds[topic] = timestamp_bounds(
        configs, rm.default_timestamp_bounds, None)
    rm.leader_quota.mark_throttled(topic, parse_throttled_partitions(
        configs.get("leader.replication.throttled.replicas"), rm.broker_id))
    rm.follower_quota.mark_throttled(topic, parse_throttled_partitions(
        configs.get("follower.replication.throttled.replicas"), rm.broker_id))
    for (t, _), p in rm.partitions.items():
        if t == topic:
            p.log.config = cfg
            _apply_topic_settings(rm, p)


def _apply_topic_settings(rm, part: Partition) -> None:
    part.min_insync_replicas = rm.topic_min_isr.get(part.topic, rm.default_min_isr)
    part.timestamp_before_max_ms, part.timestamp_after_max_ms = \
        rm.topic_timestamp_bounds.get(part.topic, rm.default_timestamp_bounds)
    part.log.producer_state.verification_enabled = rm.transaction_verification_enabled


async def become_leader_or_follower(rm, request) -> dict[TopicPartition, int]:
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
    (topic, partition) -> error code.

    Cost: linear in the partitions listed, with per-topic work (config, topic id text)
    done once per topic; the loop gives way every few ms (`LoopSlice`, checked every
    `SLICE_EVERY` partitions), so a failover's 100,000 partition states do not stall
    produce and fetch on this broker. The fetchers are changed once for the whole request
    (one remove, one add per leader), not per partition."""
    _check_controller_epoch(rm, request.controller_epoch)
    slicer = LoopSlice()  # thousands of partitions: let other requests run meanwhile
    await _create_missing_logs(rm, request, slicer)
    results: dict[TopicPartition, int] = {}
    full = getattr(request, "type", 0) == 2  # TYPE_FULL: drop what the controller forgot
    listed: set[TopicPartition] | None = set() if full else None
    leaders: list[tuple[Partition, object, object]] = []
    followers: list[tuple[Partition, object, object]] = []
    broker_id = rm.broker_id
    partitions = rm.partitions
    n = 0
    for ts in request.topic_states:
        topic = ts.topic_name
        topic_id = ts.topic_id if ts.topic_id not in (None, ZERO_UUID) else None
        topic_new = None  # (LogConfig, topic id text) for partitions created here
        for ps in ts.partition_states:
            n += 1
            if not n % SLICE_EVERY:
                await slicer.tick()
            index = ps.partition_index
            tp = (topic, index)
            if listed is not None:
                listed.add(tp)
            part = partitions.get(tp)
            if part is not None and ps.leader_epoch < part.leader_epoch:
                results[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
                continue
            replicas = ps.replicas
            if replicas and broker_id not in replicas:
                log.warning("ignoring LeaderAndIsr for %s-%d: broker %d is not in its "
                            "replicas %s", topic, index, broker_id, list(replicas))
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if part is None:
                if topic_new is None:
                    topic_new = (rm.log_config_for(topic),
                                 str(topic_id) if topic_id is not None else None)
                try:
                    part = _create_partition(rm, topic, index, topic_id, ps.is_new,
                                             *topic_new)
                except KafkaError as e:
                    results[tp] = e.code
                    continue
                except OSError as e:  # not the log's (that is a KafkaError already)
                    log.error("could not create partition %s-%d: %s", topic, index, e)
                    results[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
            (leaders if ps.leader == broker_id else followers).append((part, ps, topic_id))
            results[tp] = ErrorCode.NONE
    changed: list[TopicPartition] = []
    fetchers = rm.fetcher_manager
    if leaders and fetchers is not None:
        async for chunk in _chunks(slicer, leaders):
            fetchers.remove_fetcher_for_partitions([(p.topic, p.partition) for p, _, _ in chunk])
    for i, (part, ps, topic_id) in enumerate(leaders, 1):
        if not i % SLICE_EVERY:
            await slicer.tick()
        if part.make_leader(ps, topic_id):
            changed.append((part.topic, part.partition))
    new_followers = []
    for i, (part, ps, topic_id) in enumerate(followers, 1):
        if not i % SLICE_EVERY:
            await slicer.tick()
        if part.make_follower(ps, topic_id):
            new_followers.append(part)
    if new_followers:
        async for chunk in _chunks(slicer, new_followers):
            _make_followers(rm, chunk)
        changed.extend((p.topic, p.partition) for p in new_followers)
    if listed is not None:
        forgotten = [tp for tp in partitions if tp not in listed]
        async for chunk in _chunks(slicer, forgotten):
            if fetchers is not None:
                fetchers.remove_fetcher_for_partitions(chunk)
            for tp in chunk:
                _remove_partition(rm, tp, delete=False, wake=False, fetchers=False)
        changed.extend(forgotten)
    async for chunk in _chunks(slicer, changed):
        rm._wake_many(chunk)
    if fetchers is not None:
        await fetchers.shutdown_idle_fetchers()
    return results


async def _chunks(slicer: LoopSlice, items: list, size: int = CHUNK):
    """`items` in slices of `size`, giving way to the loop between them when due."""
    for i in range(0, len(items), size):
        if i:
            await slicer.tick()
        yield items[i:i + size]


async def _create_missing_logs(rm, request, slicer: LoopSlice) -> None:
    """Create the logs of new partitions off the event loop, in bulk (the disk's time
    for thousands of directories and files); one that fails is created again, and
    answered, by `_create_partition`."""
    lm = rm.log_manager
    create_logs = getattr(lm, "create_logs", None)
    if create_logs is None:
        return
    channel = getattr(lm, "failure_channel", None)
    degraded = channel is not None and channel.has_offline_dirs()
    hosted = rm.partitions
    offline = rm.offline_partitions
    broker_id = rm.broker_id
    specs = []
    n = 0
    for ts in request.topic_states:
        topic = ts.topic_name
        topic_id = ts.topic_id if ts.topic_id not in (None, ZERO_UUID) else None
        config = id_text = None
        for ps in ts.partition_states:
            n += 1
            if not n % SLICE_EVERY:
                await slicer.tick()
            tp = (topic, ps.partition_index)
            if tp in hosted or tp in offline or \
                    (degraded and not ps.is_new):  # its log may be in the failed dir
                continue
            if not ps.replicas or broker_id in ps.replicas:
                if config is None:
                    config = rm.log_config_for(topic)
                    id_text = None if topic_id is None else str(topic_id)
                specs.append((tp, config, id_text))
    if len(specs) > 1:
        await create_logs(specs)


def _make_followers(rm, parts: list[Partition]) -> None:
    """Restart the fetchers of partitions whose leader or leader epoch changed: one
    removal and one addition for all of them (the fetcher manager groups them per
    leader)."""
    fetchers = rm.fetcher_manager
    if fetchers is None:
        return
    fetchers.remove_fetcher_for_partitions([(p.topic, p.partition) for p in parts])
    if rm._shutdown:
        return
    initial = {}
    truncate_on_fetch = rm.truncate_on_fetch
    for p in parts:
        if p.leader_id < 0:
            continue  # no leader yet: nothing to fetch from
        plog = p.log
        offset = plog.log_end_offset \
            if truncate_on_fetch and plog.leader_epoch_cache.latest_epoch >= 0 \
            else plog.high_watermark
        initial[(p.topic, p.partition)] = InitialFetchState(p.topic_id, p.leader_id,
                                                            p.leader_epoch, offset)
    if initial:
        fetchers.add_fetcher_for_partitions(initial)


def _check_controller_epoch(rm, epoch: int) -> None:
    """STALE_CONTROLLER_EPOCH for a decision from an older controller; else remember it."""
    if epoch < rm.controller_epoch:
        raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH,
                         f"controller epoch {epoch} < {rm.controller_epoch}")
    rm.controller_epoch = epoch


def _create_partition(rm, topic: str, index: int, topic_id, is_new: bool = True,
                      config: LogConfig | None = None, topic_id_text: str | None = None
                      ) -> Partition:
    """A new hosted Partition over its log (created if missing). `config` / `topic_id_text`:
    the topic's LogConfig and topic id as text when the caller has them (once per topic)."""
    tp = (topic, index)
    lm = rm.log_manager
    if tp in rm.offline_partitions or (not is_new and lm.get_log(tp) is None
                                         and lm.failure_channel.has_offline_dirs()):
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{index}: log dir offline")
    if config is None:
        config = rm.log_config_for(topic)
    if topic_id_text is None and topic_id is not None:
        topic_id_text = str(topic_id)
    plog = lm.get_or_create_log(tp, config, topic_id_text)
    part = Partition(topic, index, rm.broker_id, plog, topic_id, rm.time_ms)
    _apply_topic_settings(rm, part)
    part.replica_lag_time_max_ms = rm.replica_lag_time_max_ms
    part.alter_partition, part.is_replica_isr_eligible, part.wake_hook = _partition_hooks(rm)
    rm.partitions[tp] = part
    rm.partitions_changed()
    return part


def _partition_hooks(rm) -> tuple:
    """(alter_partition, is_replica_isr_eligible, wake_hook) for a new Partition: one set of
    bound methods shared by every partition of `rm` (a bound method or partial per
    partition costs ~300 bytes at 100,000 partitions), rebuilt if the AlterPartition
    manager was set since."""
    alter = rm._submit_alter_partition if rm.alter_partition_manager is not None else None
    hooks = rm.__dict__.get("_partition_hooks")
    if hooks is None or hooks[0] != alter:
        hooks = rm.__dict__["_partition_hooks"] = (alter, rm._is_broker_alive, rm._wake)
    return hooks


async def stop_replicas(rm, request) -> dict[TopicPartition, int]:
    """Apply a StopReplica decision (v4 shape): stop hosting each partition; delete its
    log when `delete_partition` (or leader epoch -2). Parked operations on it complete
    (UNKNOWN_TOPIC_OR_PARTITION). Stale controller epoch -> STALE_CONTROLLER_EPOCH."""
    _check_controller_epoch(rm, request.controller_epoch)
    results: dict[TopicPartition, int] = {}
    stopped: list[tuple[TopicPartition, bool]] = []
    for ts in request.topic_states:
        for ps in ts.partition_states:
            tp = (ts.topic_name, ps.partition_index)
            delete = bool(ps.delete_partition) or ps.leader_epoch == EPOCH_DURING_DELETE
            part = rm.partitions.get(tp)
            if part is not None and ps.leader_epoch >= 0 and \
                    ps.leader_epoch < part.leader_epoch:
                results[tp] = ErrorCode.FENCED_LEADER_EPOCH
                continue
            if tp in rm.offline_partitions:
                results[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            stopped.append((tp, delete))
            results[tp] = ErrorCode.NONE
    if stopped and rm.fetcher_manager is not None:  # once for all, not per partition
        rm.fetcher_manager.remove_fetcher_for_partitions({tp for tp, _ in stopped})
    for tp, delete in stopped:
        _remove_partition(rm, tp, delete, wake=False, fetchers=False)
    rm._wake_many(results)
    return results


def partitions_deleted(rm, tps: Iterable[TopicPartition]) -> None:
    """UpdateMetadata removed these partitions (topic deletion in progress): complete the
    operations parked on them. Logs are deleted by the StopReplica that follows."""
    keys = []
    for tp in tps:
        part = rm.partitions.get(tuple(tp))
        if part is not None:
            part.leader_id = -1
        keys.append(tuple(tp))
    rm._wake_many(keys)


def _remove_partition(rm, tp: TopicPartition, delete: bool, wake: bool = True,
                      fetchers: bool = True) -> None:
    """Stop hosting `tp` (its fetcher stops too unless `fetchers` is False: the caller
    removed it already, with others)."""
    if fetchers and rm.fetcher_manager is not None:
        rm.fetcher_manager.remove_fetcher_for_partitions([tp])
    part = rm.partitions.pop(tp, None)
    if part is not None:
        part.deleted = True
        rm.partitions_changed()
    if delete:
        rm.log_manager.delete_log(tp)
    if wake:
        rm._wake(tp)
