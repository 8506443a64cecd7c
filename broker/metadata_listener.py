"""BrokerMetadataListener: where controller decisions enter the broker.

Implements :class:`controller.api.BrokerMetadataListener` (the controller boundary,
INTERFACES.md): the controller's channel calls it one decision at a time, in order, and it
forwards each as Kafka's ``KafkaApis`` does for the controller requests:

- LeaderAndIsr -> ``ReplicaManager.become_leader_or_follower`` (logs created/opened, leader
  epoch, ISR, HW);
- UpdateMetadata -> ``MetadataCache.update_metadata_sliced``; the partitions it removed (topic
  deletion, or absent from a FULL update) go to ``ReplicaManager.partitions_deleted`` when
  the ReplicaManager offers it (delayed produce/fetch on them complete with an error);
- StopReplica -> ``ReplicaManager.stop_replicas`` (deletes logs when ``delete_partition``);
- topic config change -> ``ReplicaManager.on_topic_config_change`` (live LogConfig update).

A decision with an older controller epoch raises ``KafkaError(STALE_CONTROLLER_EPOCH)`` (the
MetadataCache / ReplicaManager check it); the channel logs and counts the failure.
Without a ReplicaManager (``None``: the data path is not built in) only the MetadataCache is
kept up to date.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from broker.metadata_cache import MetadataCache
from controller import api

__all__ = ["BrokerMetadataListener"]

log = logging.getLogger(__name__)


async def _maybe_await(result: Any) -> Any:
    if inspect.isawaitable(result):
        return await result
    return result


class BrokerMetadataListener(api.BrokerMetadataListener):
    def __init__(self, metadata_cache: MetadataCache, replica_manager: Any = None) -> None:
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.applied = {"leader_and_isr": 0, "update_metadata": 0, "stop_replica": 0,
                        "config_change": 0}
        self.dynamic_config: Any = None  # broker.dynamic_config.DynamicBrokerConfig

    async def on_leader_and_isr(self, decision: Any) -> dict | None:
        """Returns the ReplicaManager's ``{(topic, partition): error code}`` (for the
        LeaderAndIsr response in ZooKeeper mode)."""
        results = None
        if self.replica_manager is not None:
            results = await _maybe_await(self.replica_manager.become_leader_or_follower(decision))
        self.applied["leader_and_isr"] += 1
        return results

    async def on_update_metadata(self, decision: Any) -> None:
        deleted = await self.metadata_cache.update_metadata_sliced(decision)
        self.applied["update_metadata"] += 1
        if deleted:
            log.info("metadata: %d partitions removed", len(deleted))
            hook = getattr(self.replica_manager, "partitions_deleted", None)
            if hook is not None:
                await _maybe_await(hook(deleted))

    async def on_stop_replica(self, decision: Any) -> dict | None:
        """Returns the ReplicaManager's ``{(topic, partition): error code}``."""
        results = None
        if self.replica_manager is not None:
            results = await _maybe_await(self.replica_manager.stop_replicas(decision))
        self.applied["stop_replica"] += 1
        return results

    async def on_topic_config_change(self, topic: str, configs: dict[str, str]) -> None:
        if self.replica_manager is not None:
            await _maybe_await(self.replica_manager.on_topic_config_change(topic, configs))
        self.applied["config_change"] += 1

    async def on_broker_config_change(self, entity: str, configs: dict[str, str]) -> None:
        """KIP-226: ``entity`` ("<id>" or "<default>") has the overrides ``configs``."""
        if self.dynamic_config is not None:
            self.dynamic_config.on_change(entity, configs)
        self.applied["config_change"] += 1
