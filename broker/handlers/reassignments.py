"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455.

Behaviour (Kafka's ZooKeeper-mode KafkaApis + KafkaController): both go to
``controller.alter_partition_reassignments`` / ``list_partition_reassignments``. Alter: per
partition, a target replica list starts (or replaces) a reassignment, a null list cancels one;
codes INVALID_REPLICA_ASSIGNMENT (empty, duplicate or negative ids, new replicas on brokers
that are not live), UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS (cancel without
one); the call returns once the reassignment started (data movement continues). List: the
partitions being reassigned (all, or those asked for) with their replicas, adding and
removing replicas. A broker that is not the controller answers the top-level
NOT_CONTROLLER (14), and clients retry on the controller.

Authorization: ALTER (alter) / DESCRIBE (list) on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.

Version notes: Alter v0-v1, List v0 (flexible). Alter v1 (KIP-860):
``allow_replication_factor_change`` false refuses, per partition, a target list whose
length differs from the partition's current replica count: INVALID_REPLICATION_FACTOR
"The replication factor is changed from N to M" (Kafka's message); the response echoes the
option.
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import handles
from protocol import api
from protocol.errors import ErrorCode, KafkaError

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
AlterResponse = api.API_KEYS[ALTER_REASSIGNMENTS].response_cls
ListResponse = api.API_KEYS[LIST_REASSIGNMENTS].response_cls


def alter_error_response(request, version: int, error: KafkaError):
    return AlterResponse(error_code=int(error.code), error_message=error.message, responses=[],
                         allow_replication_factor_change=request.allow_replication_factor_change)


def _replication_factor_changes(cache, wanted: dict) -> dict:
    """{tp: (INVALID_REPLICATION_FACTOR, message)} for targets whose length is not the
    partition's current replica count (partitions the cache does not know are left to the
    controller, which answers UNKNOWN_TOPIC_OR_PARTITION)."""
    out = {}
    for (topic, p), target in wanted.items():
        state = cache.partition_state(topic, p) if target is not None else None
        if state is not None and len(state.replicas) != len(target):
            out[(topic, p)] = (ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"The replication factor is changed from {len(state.replicas)} "
                               f"to {len(target)}")
    return out


@handles(ALTER_REASSIGNMENTS, 0, 1, error_response=alter_error_response)
async def handle_alter_partition_reassignments(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.ALTER)
    wanted: dict[tuple[str, int], list[int] | None] = {}
    for t in request.topics:
        for p in t.partitions:
            wanted[(t.name, p.partition_index)] = \
                None if p.replicas is None else list(p.replicas)
    allow = request.allow_replication_factor_change
    refused = {} if allow else _replication_factor_changes(ctx.broker.metadata_cache, wanted)
    for tp in refused:
        del wanted[tp]
    top, results = await ctx.broker.controller.alter_partition_reassignments(wanted) \
        if wanted else (ErrorCode.NONE, {})
    if top:
        return AlterResponse(error_code=int(top), responses=[],
                             allow_replication_factor_change=allow)
    results = {**results, **refused}
    by_topic: dict[str, list] = {}
    for (topic, p), (code, msg) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(AlterResponse.ReassignablePartitionResponse(
            partition_index=p, error_code=int(code), error_message=msg))
    return AlterResponse(error_code=0, allow_replication_factor_change=allow, responses=[
        AlterResponse.ReassignableTopicResponse(name=t, partitions=ps)
        for t, ps in by_topic.items()])


def list_error_response(request, version: int, error: KafkaError):
    return ListResponse(error_code=int(error.code), error_message=error.message, topics=[])


@handles(LIST_REASSIGNMENTS, 0, 0, error_response=list_error_response)
async def handle_list_partition_reassignments(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.DESCRIBE)
    wanted = None
    if request.topics is not None:
        wanted = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    top, results = await ctx.broker.controller.list_partition_reassignments(wanted)
    if top:
        return ListResponse(error_code=int(top), topics=[])
    by_topic: dict[str, list] = {}
    for (topic, p), a in sorted(results.items()):
        by_topic.setdefault(topic, []).append(ListResponse.OngoingPartitionReassignment(
            partition_index=p, replicas=list(a.replicas), adding_replicas=list(a.adding_replicas),
            removing_replicas=list(a.removing_replicas)))
    return ListResponse(error_code=0, topics=[
        ListResponse.OngoingTopicReassignment(name=t, partitions=ps)
        for t, ps in by_topic.items()])
