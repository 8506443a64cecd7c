"""How the broker runs the group coordinator (called once from ``broker.server``).

``attach_group_coordinator(services, listener)`` builds a GroupCoordinator from the broker
config (``GroupConfig.from_kafka_config``) over a GroupStore on the ReplicaManager
(``group_store_from_config``: ConfigError for an unknown ``offsets.topic.compression.codec``), sets
``services.group_coordinator`` and hooks the controller decisions that move coordinator
ownership (Kafka's ``onElection`` / ``onResignation`` from LeaderAndIsr and StopReplica):

- LeaderAndIsr: every ``__consumer_offsets`` partition this broker now leads is loaded
  (after the ReplicaManager applied the decision); one it follows is unloaded; a FULL
  decision unloads the partitions it does not list.
- StopReplica: its ``__consumer_offsets`` partitions are unloaded.
- UpdateMetadata deleting ``__consumer_offsets`` partitions unloads them.

The hooks wrap the listener's own methods (the listener stays the one the controller calls).
Returns the coordinator; ``await coordinator.shutdown()`` stops it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable

from broker.config import ConfigError
from coordinator.group.consumer_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    TopicView,
)
from coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from coordinator.group.group_store import (
    COMPRESSION_CODECS,
    COMPRESSION_CODECS_ALLOWED,
    GROUP_METADATA_TOPIC,
    GroupStore,
)

__all__ = ["attach_group_coordinator", "apply_leader_and_isr", "apply_stop_replica",
           "group_store_from_config", "hook_coordinator_partitions", "apply_partition_decision"]

log = logging.getLogger(__name__)
TYPE_FULL = 2


def apply_partition_decision(topic: str, broker_id: int, on_election, on_resignation,
                             current: Callable[[], Iterable[int]], decision,
                             results: dict | None = None) -> None:
    """A LeaderAndIsr decision for a coordinator topic: partitions this broker leads are
    elected (with the leader epoch as coordinator epoch), others resigned; a FULL decision
    resigns the `current()` partitions it does not list. `results` (the ReplicaManager's
    ``{(topic, partition): error code}``): a partition it failed (e.g. KAFKA_STORAGE_ERROR,
    an offline log dir) is resigned, not elected."""
    listed: set[int] = set()
    for ts in decision.topic_states:
        if ts.topic_name != topic:
            continue
        for ps in ts.partition_states:
            listed.add(ps.partition_index)
            failed = bool(results and results.get((topic, ps.partition_index)))
            if ps.leader == broker_id and not failed:
                on_election(ps.partition_index, ps.leader_epoch)
            else:
                on_resignation(ps.partition_index)
    if getattr(decision, "type", 0) == TYPE_FULL:
        for p in list(current()):
            if p not in listed:
                on_resignation(p)


def _partitions_of(decision, topic: str, deleted_only: bool = False) -> list[int]:
    return [ps.partition_index for ts in decision.topic_states if ts.topic_name == topic
            for ps in ts.partition_states if not deleted_only or ps.leader == -2]


def hook_coordinator_partitions(listener, topic: str, broker_id: int, on_election,
                                on_resignation, current: Callable[[], Iterable[int]]) -> None:
    """Wrap the listener's methods (the listener stays the one the controller calls) so that
    LeaderAndIsr (after the ReplicaManager applied it) elects/resigns the coordinator's
    partitions of `topic`, StopReplica (before) and UpdateMetadata deleting partitions
    (leader -2, after) resign them. The wrapped methods' results are passed through. Used by
    the group and the transaction coordinators."""
    on_leader_and_isr = listener.on_leader_and_isr
    on_stop_replica = listener.on_stop_replica
    on_update_metadata = listener.on_update_metadata

    @functools.wraps(on_leader_and_isr)
    async def leader_and_isr(decision):
        results = await on_leader_and_isr(decision)
        apply_partition_decision(topic, broker_id, on_election, on_resignation, current,
                                 decision, results)
        return results

    @functools.wraps(on_stop_replica)
    async def stop_replica(decision):
        for p in _partitions_of(decision, topic):
            on_resignation(p)
        return await on_stop_replica(decision)

    @functools.wraps(on_update_metadata)
    async def update_metadata(decision):
        result = await on_update_metadata(decision)
        for p in _partitions_of(decision, topic, deleted_only=True):
            on_resignation(p)
        return result

    listener.on_leader_and_isr = leader_and_isr
    listener.on_stop_replica = stop_replica
    listener.on_update_metadata = update_metadata


def apply_leader_and_isr(coordinator: GroupCoordinator, broker_id: int, decision) -> None:
    apply_partition_decision(GROUP_METADATA_TOPIC, broker_id, coordinator.on_election,
                             coordinator.on_resignation,
                             lambda: coordinator.owned | coordinator.loading, decision)


def apply_stop_replica(coordinator: GroupCoordinator, decision) -> None:
    for p in _partitions_of(decision, GROUP_METADATA_TOPIC):
        coordinator.on_resignation(p)


def group_store_from_config(config, replica_manager) -> GroupStore:
    """The GroupStore of a broker config (``offsets.topic.num.partitions``,
    ``offsets.load.buffer.size``, ``offsets.commit.timeout.ms``,
    ``offsets.topic.compression.codec``; an unknown codec raises ConfigError)."""
    codec = config.get("offsets.topic.compression.codec")
    if codec not in COMPRESSION_CODECS:
        raise ConfigError("offsets.topic.compression.codec", codec, COMPRESSION_CODECS_ALLOWED)
    return GroupStore(replica_manager, config.get("offsets.topic.num.partitions"),
                      load_buffer_size=config.get("offsets.load.buffer.size"),
                      commit_timeout_ms=config.get("offsets.commit.timeout.ms"),
                      compression_type=codec)


def attach_share_groups(services, coordinator: GroupCoordinator) -> None:
    """Share-group membership (``coordinator.group.share_groups``); its persister (the
    share coordinator's client) is set later by ``broker.share.wiring``."""
    from coordinator.group.share_groups import ShareGroupConfig, ShareGroupCoordinator
    cfg = ShareGroupConfig.from_kafka_config(services.config)

    def share_timeouts(group_id: str) -> tuple[int, int]:
        manager = getattr(services, "group_configs", None)  # broker.group_configs
        if manager is None:
            return cfg.session_timeout_ms, cfg.heartbeat_interval_ms
        return manager.share_timeouts(group_id)

    cfg.group_overrides = share_timeouts
    coordinator.share = ShareGroupCoordinator(coordinator, cfg, TopicView(services.metadata_cache))


def attach_group_coordinator(services, listener) -> GroupCoordinator | None:
    if services.replica_manager is None:
        return None
    cfg = GroupConfig.from_kafka_config(services.config)
    store = group_store_from_config(services.config, services.replica_manager)
    coordinator = GroupCoordinator(services.broker_id, cfg, store, services.timer)
    # KIP-848 consumer groups share the partitions, store and offsets (issue 16)
    consumer_cfg = ConsumerGroupConfig.from_kafka_config(services.config)

    def group_overrides(group_id: str, session_ms: int, heartbeat_ms: int):
        manager = getattr(services, "group_configs", None)  # broker.group_configs
        if manager is None:
            return session_ms, heartbeat_ms
        return manager.consumer_timeouts(group_id, session_ms, heartbeat_ms)

    consumer_cfg.group_overrides = group_overrides
    coordinator.consumer = ConsumerGroupCoordinator(
        coordinator, consumer_cfg, TopicView(services.metadata_cache))
    attach_share_groups(services, coordinator)  # KIP-932 (issue 28)
    coordinator.startup()
    services.group_coordinator = coordinator

    hook_coordinator_partitions(listener, GROUP_METADATA_TOPIC, services.broker_id,
                                coordinator.on_election, coordinator.on_resignation,
                                lambda: coordinator.owned | coordinator.loading)
    return coordinator
