"""The broker's gauges, read from its components at scrape time (nothing on the request path).

Registered by :func:`register_broker_gauges` at startup (and removed at shutdown):

* ``kafka.server:type=ReplicaManager``: PartitionCount, LeaderCount,
  UnderReplicatedPartitions (led here, ISR smaller than the replica set),
  UnderMinIsrPartitionCount, AtMinIsrPartitionCount, OfflineReplicaCount; the meters
  IsrShrinksPerSec / IsrExpandsPerSec exist from the start (replication marks them).
* ``kafka.controller:type=KafkaController``: ActiveControllerCount (1 on the broker whose id
  is the controller's), and on the active controller OfflinePartitionsCount (no live leader),
  PreferredReplicaImbalanceCount, GlobalTopicCount, GlobalPartitionCount (from the metadata
  the controller published; 0 on other brokers, as in Kafka).
* ``kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize|NumDelayedOperations,
  delayedOperation=<purgatory name>`` for every live purgatory.
* ``kafka.log:type=Log,name=Size|LogEndOffset|LogStartOffset|NumLogSegments,topic=,
  partition=`` per local log.
* ``kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups|NumOffsets|
  NumGroups<State>``.
* ``kafka.network:type=RequestChannel,name=RequestQueueSize|ResponseQueueSize``,
  ``kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent``,
  ``kafka.server:type=KafkaServer,name=BrokerState`` (1 STARTING, 3 RUNNING,
  6 PENDING_CONTROLLED_SHUTDOWN, 7 SHUTTING_DOWN).
* consumer lag, named as kafka_exporter names it (the usual source of these dashboards):
  ``kafka_consumergroup_current_offset`` / ``kafka_consumergroup_lag{consumergroup, topic,
  partition}`` for the groups this broker coordinates and partitions it hosts,
  ``kafka_consumergroup_members{consumergroup}``; and ``josef_event_loop_lag_seconds``.
"""

from __future__ import annotations

import weakref
from typing import Any

from broker.metrics.core import MetricsRegistry, NativeFamily

__all__ = ["register_broker_gauges", "unregister_broker_gauges", "track_purgatory"]

_PURGATORIES: weakref.WeakSet = weakref.WeakSet()
_GROUP_STATES = (("PreparingRebalance", "NumGroupsPreparingRebalance"),
                 ("CompletingRebalance", "NumGroupsCompletingRebalance"),
                 ("Stable", "NumGroupsStable"), ("Dead", "NumGroupsDead"),
                 ("Empty", "NumGroupsEmpty"))
_KEY = "broker:"


def track_purgatory(purgatory: Any) -> None:
    """Report ``purgatory`` (anything with ``name``, ``watched``, ``delayed``) while alive."""
    _PURGATORIES.add(purgatory)


def _replica_manager_gauges(rm) -> list[tuple[str, float]]:
    base = "kafka.server:type=ReplicaManager,name="
    parts = leaders = urp = under_min = at_min = 0
    if rm is not None:
        for part in list(rm.partitions.values()):
            parts += 1
            if not part.is_leader:
                continue
            leaders += 1
            if hasattr(part, "is_under_replicated"):  # Kafka's Partition predicates
                urp += part.is_under_replicated
                under_min += part.is_under_min_isr
                at_min += part.is_at_min_isr
                continue
            isr = len(part.isr)
            if isr < len(part.replicas):
                urp += 1
            min_isr = getattr(part, "min_insync_replicas", 1) or 1
            if isr < min_isr:
                under_min += 1
            elif isr == min_isr:
                at_min += 1
    return [(base + "PartitionCount", parts), (base + "LeaderCount", leaders),
            (base + "UnderReplicatedPartitions", urp),
            (base + "UnderMinIsrPartitionCount", under_min),
            (base + "AtMinIsrPartitionCount", at_min),
            (base + "OfflineReplicaCount", len(getattr(rm, "offline_partitions", ())))]


def _controller_gauges(services) -> list[tuple[str, float]]:
    base = "kafka.controller:type=KafkaController,name="
    controller = services.controller
    cache = services.metadata_cache
    active = 0
    if controller is not None:
        is_active = getattr(controller, "is_active", None)
        if is_active is None:
            is_active = getattr(controller, "controller_id", None) == services.broker_id
        active = 1 if is_active else 0
    topics = partitions = offline = imbalance = 0
    if active and cache is not None:
        for topic in cache.all_topics():
            n = cache.num_partitions(topic) or 0
            topics += 1
            partitions += n
            for p in range(n):
                s = cache.partition_state(topic, p)
                if s is None:
                    continue
                if s.leader < 0 or not cache.is_alive(s.leader):
                    offline += 1
                elif s.replicas and s.leader != s.replicas[0]:
                    imbalance += 1
    return [(base + "ActiveControllerCount", active), (base + "OfflinePartitionsCount", offline),
            (base + "PreferredReplicaImbalanceCount", imbalance),
            (base + "GlobalTopicCount", topics), (base + "GlobalPartitionCount", partitions)]


def _purgatory_gauges() -> list[tuple[str, float]]:
    base = "kafka.server:type=DelayedOperationPurgatory,name="
    sizes: dict[str, list[int]] = {}
    for p in list(_PURGATORIES):
        s = sizes.setdefault(p.name, [0, 0])
        s[0] += p.watched
        s[1] += p.delayed
    out = []
    for name, (watched, delayed) in sizes.items():
        out.append((f"{base}PurgatorySize,delayedOperation={name}", watched))
        out.append((f"{base}NumDelayedOperations,delayedOperation={name}", delayed))
    return out


def _log_gauges(log_manager) -> list[tuple[str, float]]:
    out = []
    if log_manager is None:
        return out
    names = _LOG_NAMES
    if len(names) > 1_000_000:
        names.clear()
    for tp, lg in log_manager.all_logs().items():
        n = names.get(tp)
        if n is None:
            tags = f",topic={tp[0]},partition={tp[1]}"
            n = names[tp] = tuple(f"kafka.log:type=Log,name={m}{tags}" for m in
                                  ("Size", "LogEndOffset", "LogStartOffset", "NumLogSegments"))
        out.append((n[0], lg.size_in_bytes))
        out.append((n[1], lg.log_end_offset))
        out.append((n[2], lg.log_start_offset))
        out.append((n[3], lg.num_segments))
    return out


_LOG_NAMES: dict[tuple[str, int], tuple[str, ...]] = {}


def _group_gauges(coordinator) -> list[tuple[str, float]]:
    base = "kafka.coordinator.group:type=GroupMetadataManager,name="
    groups = list(coordinator.groups.values()) if coordinator is not None else []
    counts = dict.fromkeys((s for s, _ in _GROUP_STATES), 0)
    offsets = 0
    for g in groups:
        state = str(g.state)
        counts[state] = counts.get(state, 0) + 1
        offsets += len(g.offsets)
    out = [(base + "NumGroups", len(groups)), (base + "NumOffsets", offsets)]
    out.extend((base + metric, counts.get(state, 0)) for state, metric in _GROUP_STATES)
    return out


def _lag_families(services) -> list[NativeFamily]:
    coordinator = services.group_coordinator
    rm = services.replica_manager
    current: list[tuple[dict[str, str], float]] = []
    lag: list[tuple[dict[str, str], float]] = []
    members: list[tuple[dict[str, str], float]] = []
    if coordinator is not None:
        for gid, g in list(coordinator.groups.items()):
            members.append(({"consumergroup": gid}, len(g.members)))
            for (topic, p), om in list(g.offsets.items()):
                labels = {"consumergroup": gid, "topic": topic, "partition": str(p)}
                current.append((labels, om.offset))
                part = rm.partitions.get((topic, p)) if rm is not None else None
                if part is not None and part.log is not None:
                    lag.append((labels, max(0, part.high_watermark - om.offset)))
    return [
        NativeFamily("kafka_consumergroup_current_offset", "gauge",
                     "Committed offset of a consumer group for a partition", current),
        NativeFamily("kafka_consumergroup_lag", "gauge",
                     "High watermark minus the group's committed offset", lag),
        NativeFamily("kafka_consumergroup_members", "gauge",
                     "Members of a consumer group", members),
    ]


def register_broker_gauges(registry: MetricsRegistry, services, socket_server=None,
                           loop_monitor=None, topic_stats=None) -> None:
    """Register every broker gauge reading ``services`` (``broker.server.BrokerServices``)."""
    registry.meter("kafka.server:type=ReplicaManager,name=IsrShrinksPerSec")
    registry.meter("kafka.server:type=ReplicaManager,name=IsrExpandsPerSec")
    registry.meter("kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec")
    registry.histogram("kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs")

    def broker_values():
        out = _replica_manager_gauges(services.replica_manager)
        out += _controller_gauges(services)
        out += _purgatory_gauges()
        out += _log_gauges(services.log_manager)
        out += _group_gauges(services.group_coordinator)
        out.append(("kafka.server:type=KafkaServer,name=BrokerState",
                    getattr(services, "broker_state", 3)))
        if socket_server is not None:
            channel = socket_server.request_channel
            out.append(("kafka.network:type=RequestChannel,name=RequestQueueSize",
                        channel.size if channel is not None else 0))
            out.append(("kafka.network:type=RequestChannel,name=ResponseQueueSize", 0))
        if loop_monitor is not None:
            out.append(("kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
                        loop_monitor.idle_fraction))
        if topic_stats is not None and services.metadata_cache is not None:
            topic_stats.retain(set(services.metadata_cache.all_topics()))
        return out

    def native():
        fams = _lag_families(services)
        if loop_monitor is not None:
            fams.append(NativeFamily("josef_event_loop_lag_seconds", "gauge",
                                     "Largest event-loop timer lateness in the last 10 s",
                                     [({}, loop_monitor.lag_seconds)]))
        return fams

    registry.gauge_provider(_KEY + "gauges", broker_values)
    registry.native_provider(_KEY + "native", native)


def unregister_broker_gauges(registry: MetricsRegistry) -> None:
    registry.remove(_KEY + "gauges")
    registry.remove(_KEY + "native")
