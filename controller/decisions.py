"""Builders for controller decisions: LeaderAndIsr v7, UpdateMetadata v8, StopReplica v4.

The decisions are the generated ``protocol.messages`` classes, filled in the shape of the
newest ZooKeeper-era version of each request, so the ZooKeeper controller can put the very
same objects on the wire (``encode(7)`` / ``encode(8)`` / ``encode(4)``). Partitions are
grouped per topic in ascending partition order; topics keep the caller's order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from controller.zk_data import (
    EPOCH_DURING_DELETE,
    LEADER_DURING_DELETE,
    BrokerInfo,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
)
from protocol.messages import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4


@dataclass(frozen=True)
class PartitionView:
    """Everything the controller knows about one partition, as decisions need it."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    assignment: ReplicaAssignment
    state: LeaderIsrAndControllerEpoch


def _by_topic(parts: Iterable[PartitionView]) -> dict[str, list[PartitionView]]:
    out: dict[str, list[PartitionView]] = {}
    for p in parts:
        out.setdefault(p.topic, []).append(p)
    for ps in out.values():
        ps.sort(key=lambda v: v.partition)
    return out


def leader_and_isr(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    request_type: int,
    partitions: Iterable[PartitionView],
    live_brokers: Iterable[BrokerInfo],
    is_new: bool = False,
) -> LeaderAndIsrRequest:
    """A LeaderAndIsr decision for ``partitions``; ``live_leaders`` lists the live brokers
    that lead at least one of them (host/port of their first endpoint)."""
    groups = _by_topic(partitions)
    leaders = {p.state.leader for ps in groups.values() for p in ps}
    topic_states = [
        LeaderAndIsrRequest.LeaderAndIsrTopicState(
            topic_name=topic,
            topic_id=ps[0].topic_id,
            partition_states=[
                LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                    topic_name=topic,
                    partition_index=p.partition,
                    controller_epoch=p.state.controller_epoch,
                    leader=p.state.leader,
                    leader_epoch=p.state.leader_epoch,
                    isr=list(p.state.isr),
                    partition_epoch=p.state.partition_epoch,
                    replicas=list(p.assignment.replicas),
                    adding_replicas=list(p.assignment.adding_replicas),
                    removing_replicas=list(p.assignment.removing_replicas),
                    is_new=is_new,
                    leader_recovery_state=0,
                )
                for p in ps
            ],
        )
        for topic, ps in groups.items()
    ]
    live_leaders = [
        LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
            broker_id=b.id, host_name=b.endpoints[0].host, port=b.endpoints[0].port
        )
        for b in live_brokers
        if b.id in leaders and b.endpoints
    ]
    return LeaderAndIsrRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        type=request_type,
        topic_states=topic_states,
        live_leaders=live_leaders,
    )


def update_metadata(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    request_type: int,
    partitions: Iterable[PartitionView],
    live_brokers: Iterable[BrokerInfo],
    deleting: bool = False,
) -> UpdateMetadataRequest:
    """An UpdateMetadata decision. ``deleting`` marks every partition with leader
    ``LEADER_DURING_DELETE`` so caches drop them (Kafka's topic deletion). Offline replicas
    are the replicas that are not live brokers."""
    brokers = list(live_brokers)
    live_ids = {b.id for b in brokers}
    topic_states = []
    for topic, ps in _by_topic(partitions).items():
        states = []
        for p in ps:
            leader = LEADER_DURING_DELETE if deleting else p.state.leader
            states.append(
                UpdateMetadataRequest.UpdateMetadataPartitionState(
                    topic_name=topic,
                    partition_index=p.partition,
                    controller_epoch=p.state.controller_epoch,
                    leader=leader,
                    leader_epoch=p.state.leader_epoch,
                    isr=list(p.state.isr),
                    zk_version=p.state.partition_epoch,
                    replicas=list(p.assignment.replicas),
                    offline_replicas=[r for r in p.assignment.replicas if r not in live_ids],
                )
            )
        topic_states.append(
            UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=topic, topic_id=ps[0].topic_id, partition_states=states
            )
        )
    live = [
        UpdateMetadataRequest.UpdateMetadataBroker(
            id=b.id,
            endpoints=[
                UpdateMetadataRequest.UpdateMetadataEndpoint(
                    port=e.port,
                    host=e.host,
                    listener=e.listener_name,
                    security_protocol=e.security_protocol_id,
                )
                for e in b.endpoints
            ],
            rack=b.rack,
        )
        for b in brokers
    ]
    return UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        type=request_type,
        topic_states=topic_states,
        live_brokers=live,
    )


def stop_replica(
    controller_id: int,
    controller_epoch: int,
    broker_epoch: int,
    partitions: Iterable[tuple[str, int, int]],
    delete: bool,
) -> StopReplicaRequest:
    """A StopReplica decision for ``(topic, partition, leader_epoch)`` triples. When
    ``delete`` the leader epoch sent is ``EPOCH_DURING_DELETE`` (-2), which overrides any
    epoch the broker holds (KIP-570)."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for topic, partition, epoch in partitions:
        groups.setdefault(topic, []).append((partition, epoch))
    topic_states = [
        StopReplicaRequest.StopReplicaTopicState(
            topic_name=topic,
            partition_states=[
                StopReplicaRequest.StopReplicaPartitionState(
                    partition_index=p,
                    leader_epoch=EPOCH_DURING_DELETE if delete else epoch,
                    delete_partition=delete,
                )
                for p, epoch in sorted(ps)
            ],
        )
        for topic, ps in groups.items()
    ]
    return StopReplicaRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        topic_states=topic_states,
    )
