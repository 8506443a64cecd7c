"""How the broker runs share groups (called once from ``broker.server``).

``attach_share_groups(services, listener)`` builds, over the broker's coordinator runtime
(``broker.coordinator_runtime``):
- the share coordinator of ``__share_group_state`` (``coordinator.share.share_coordinator``),
  following this broker's leaderships of that topic;
- the persister that reaches it (``broker.share.persister``: local calls or the
  *ShareGroupState RPCs on the inter-broker listener);
- the SharePartitionManager, its share sessions and the ShareFetch path with its
  DelayedShareFetch in the ReplicaManager's fetch purgatory (``broker.share``);
- the dead-letter writer (``broker.share.dead_letters``);
and hands the persister to the group coordinator's share-group membership (offsets admin,
DeleteGroups). It sets ``services.share_coordinator``, ``services.share_partitions`` and
``services.share_persister``. After every LeaderAndIsr / StopReplica the manager closes the
share-partitions this broker no longer leads. ``shutdown_share_groups(services)`` stops it all.
"""

from __future__ import annotations

import functools

from broker.coordinator_runtime import BrokerCoordinatorRuntime
from broker.share.dead_letters import DeadLetterWriter
from broker.share.fetch import ShareFetcher
from broker.share.metrics import ShareMetrics
from broker.share.partition_manager import SharePartitionManager
from broker.share.persister import BrokerSharePersister
from coordinator.share.share_coordinator import ShareCoordinator, ShareCoordinatorConfig

__all__ = ["attach_share_groups", "shutdown_share_groups"]


def attach_share_groups(services, listener) -> SharePartitionManager | None:
    if services.replica_manager is None:
        return None
    config = services.config
    runtime = BrokerCoordinatorRuntime(services, listener,
                                       config.get("share.coordinator.load.buffer.size"))
    coordinator = ShareCoordinator(runtime, ShareCoordinatorConfig.from_kafka_config(config.get))
    coordinator.startup()
    links = runtime.inter_broker("share-persister")
    persister = BrokerSharePersister(services, coordinator, links,
                                     max_retry_ms=config.get("share.coordinator.write.timeout.ms")
                                     + 3000)
    manager = SharePartitionManager(services, persister, runtime.timer,
                                    config.get("group.share.max.share.sessions"))
    purgatory = services.replica_manager.delayed_fetch_purgatory
    manager.fetcher = ShareFetcher(manager, purgatory)
    manager.on_wake = purgatory.check_and_complete
    manager.metrics = ShareMetrics()
    manager.metrics.register(services)
    manager.dead_letters = DeadLetterWriter(services, manager, links)
    manager.links = links
    services.share_coordinator = coordinator
    services.share_partitions = manager
    services.share_persister = persister
    gc = services.group_coordinator
    if gc is not None and gc.share is not None:
        gc.share.persister = persister
    _hook_leadership(listener, manager)
    return manager


def _hook_leadership(listener, manager: SharePartitionManager) -> None:
    for name in ("on_leader_and_isr", "on_stop_replica", "on_update_metadata"):
        inner = getattr(listener, name)

        @functools.wraps(inner)
        async def hooked(decision, _inner=inner):
            result = await _inner(decision)
            manager.on_leadership_changed()
            return result

        setattr(listener, name, hooked)


async def shutdown_share_groups(services) -> None:
    manager = getattr(services, "share_partitions", None)
    if manager is not None:
        if manager.dead_letters is not None:
            await manager.dead_letters.shutdown()
        await manager.shutdown()
        await manager.links.close()
    coordinator = getattr(services, "share_coordinator", None)
    if coordinator is not None:
        await coordinator.shutdown()
