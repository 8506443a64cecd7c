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

from broker.config import ConfigError
from broker.coordinator.consumer_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    TopicView,
)
from broker.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from broker.coordinator.group_store import (
    COMPRESSION_CODECS,
    COMPRESSION_CODECS_ALLOWED,
    GROUP_METADATA_TOPIC,
    GroupStore,
)

__all__ = ["attach_group_coordinator", "apply_leader_and_isr", "apply_stop_replica",
           "group_store_from_config"]

log = logging.getLogger(__name__)
TYPE_FULL = 2


def apply_leader_and_isr(coordinator: GroupCoordinator, broker_id: int, decision) -> None:
    listed: set[int] = set()
    for ts in decision.topic_states:
        if ts.topic_name != GROUP_METADATA_TOPIC:
            continue
        for ps in ts.partition_states:
            listed.add(ps.partition_index)
            if ps.leader == broker_id:
                coordinator.on_election(ps.partition_index, ps.leader_epoch)
            else:
                coordinator.on_resignation(ps.partition_index)
    if getattr(decision, "type", 0) == TYPE_FULL:
        for p in list(coordinator.owned | coordinator.loading):
            if p not in listed:
                coordinator.on_resignation(p)


def apply_stop_replica(coordinator: GroupCoordinator, decision) -> None:
    for ts in decision.topic_states:
        if ts.topic_name == GROUP_METADATA_TOPIC:
            for ps in ts.partition_states:
                coordinator.on_resignation(ps.partition_index)


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


def attach_group_coordinator(services, listener) -> GroupCoordinator | None:
    if services.replica_manager is None:
        return None
    cfg = GroupConfig.from_kafka_config(services.config)
    store = group_store_from_config(services.config, services.replica_manager)
    coordinator = GroupCoordinator(services.broker_id, cfg, store, services.timer)
    # KIP-848 consumer groups share the partitions, store and offsets (issue 16)
    coordinator.consumer = ConsumerGroupCoordinator(
        coordinator, ConsumerGroupConfig.from_kafka_config(services.config),
        TopicView(services.metadata_cache))
    coordinator.startup()
    services.group_coordinator = coordinator

    on_leader_and_isr = listener.on_leader_and_isr
    on_stop_replica = listener.on_stop_replica
    on_update_metadata = listener.on_update_metadata

    @functools.wraps(on_leader_and_isr)
    async def leader_and_isr(decision):
        results = await on_leader_and_isr(decision)
        apply_leader_and_isr(coordinator, services.broker_id, decision)
        return results

    @functools.wraps(on_stop_replica)
    async def stop_replica(decision):
        apply_stop_replica(coordinator, decision)
        return await on_stop_replica(decision)

    @functools.wraps(on_update_metadata)
    async def update_metadata(decision):
        await on_update_metadata(decision)
        for ts in decision.topic_states:
            if ts.topic_name == GROUP_METADATA_TOPIC:
                for ps in ts.partition_states:
                    if ps.leader == -2:
                        coordinator.on_resignation(ps.partition_index)

    listener.on_leader_and_isr = leader_and_isr
    listener.on_stop_replica = stop_replica
    listener.on_update_metadata = update_metadata
    return coordinator
