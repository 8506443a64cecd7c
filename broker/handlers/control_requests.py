"""LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6): the controller's decisions arriving
over the inter-broker listener (ZooKeeper mode).

Behaviour (Kafka's ZooKeeper-mode ``KafkaApis.handleLeaderAndIsrRequest`` /
``handleStopReplicaRequest`` / ``handleUpdateMetadataRequest``): each request goes to
``controller.apply_*``, which applies it through the same BrokerMetadataListener the embedded
controller feeds (ReplicaManager, MetadataCache, group coordinator), after the fencing checks:
a broker epoch older than this broker's registration -> STALE_BROKER_EPOCH (77, KIP-380); a
controller epoch older than the newest applied -> STALE_CONTROLLER_EPOCH (11). Per-partition
errors come from the ReplicaManager (LeaderAndIsr: STALE_CONTROLLER_EPOCH for an older leader
epoch; StopReplica: FENCED_LEADER_EPOCH). A top-level error repeats in every partition of the
response, as Kafka's ``getErrorResponse``. In embedded mode there is no remote controller, so
every such request answers STALE_CONTROLLER_EPOCH and changes nothing.

Authorization: CLUSTER_ACTION on the cluster (Kafka's authorizeClusterOperation), else
CLUSTER_AUTHORIZATION_FAILED.

Version notes: served from the versions with topic grouping and ids, as sent by an
inter.broker.protocol.version >= 2.8 controller: LeaderAndIsr v5-v7 (topic ids, per-topic
errors in the response; v7 adds is_k_raft_controller), StopReplica v3-v4 (per-partition
leader epoch and delete flag), UpdateMetadata v5-v8 (v7 topic ids). Josef's controller sends
LeaderAndIsr v7, UpdateMetadata v8, StopReplica v4 (Kafka 3.9's).
"""

from __future__ import annotations

import uuid

from broker.handlers import authz
from broker.handlers.registry import handles
from protocol import api
from protocol.errors import KafkaError

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
LeaderAndIsrResponse = api.API_KEYS[LEADER_AND_ISR].response_cls
StopReplicaResponse = api.API_KEYS[STOP_REPLICA].response_cls
UpdateMetadataResponse = api.API_KEYS[UPDATE_METADATA].response_cls
ZERO_UUID = uuid.UUID(int=0)


def _lai_partitions(request, version: int):
    """``[(topic, topic_id, partition)]`` of a LeaderAndIsr request (v2+)."""
    return [(ts.topic_name, ts.topic_id or ZERO_UUID, ps.partition_index)
            for ts in request.topic_states for ps in ts.partition_states]


def _lai_response(request, version: int, top: int, errors: dict):
    parts = _lai_partitions(request, version)
    by_topic: dict = {}
    for t, tid, p in parts:
        by_topic.setdefault((t, tid), []).append(
            LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                partition_index=p, error_code=top or int(errors.get((t, p), 0))))
    return LeaderAndIsrResponse(error_code=top, topics=[
        LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=tid, partition_errors=ps)
        for (_t, tid), ps in by_topic.items()])


def leader_and_isr_error_response(request, version: int, error: KafkaError):
    return _lai_response(request, version, int(error.code), {})


@handles(LEADER_AND_ISR, 5, 7, error_response=leader_and_isr_error_response)
async def handle_leader_and_isr(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)
    top, errors = await ctx.broker.controller.apply_leader_and_isr(request)
    return _lai_response(request, ctx.api_version, top, errors)


def _stop_partitions(request, version: int):
    return [(ts.topic_name, ps.partition_index)
            for ts in request.topic_states for ps in ts.partition_states]


def _stop_response(request, version: int, top: int, errors: dict):
    return StopReplicaResponse(error_code=top, partition_errors=[
        StopReplicaResponse.StopReplicaPartitionError(
            topic_name=t, partition_index=p,
            error_code=top if top else int(errors.get((t, p), 0)))
        for t, p in _stop_partitions(request, version)])


def stop_replica_error_response(request, version: int, error: KafkaError):
    return _stop_response(request, version, int(error.code), {})


@handles(STOP_REPLICA, 3, 4, error_response=stop_replica_error_response)
async def handle_stop_replica(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)
    top, errors = await ctx.broker.controller.apply_stop_replica(request)
    return _stop_response(request, ctx.api_version, top, errors)


def update_metadata_error_response(request, version: int, error: KafkaError):
    return UpdateMetadataResponse(error_code=int(error.code))


@handles(UPDATE_METADATA, 5, 8, error_response=update_metadata_error_response)
async def handle_update_metadata(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.CLUSTER_ACTION)
    return UpdateMetadataResponse(
        error_code=await ctx.broker.controller.apply_update_metadata(request))
