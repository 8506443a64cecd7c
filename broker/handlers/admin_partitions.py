"""CreatePartitions (37), DeleteRecords (21) and ElectLeaders (43): partition-level admin.

Behaviour (Kafka's ``KafkaApis`` + ``ReplicaManager.deleteRecords`` + KIP-195/KIP-107/KIP-460):

- CreatePartitions: one result per topic from ``controller.create_partitions`` (increase
  only: INVALID_PARTITIONS when the count is not above the current one;
  INVALID_REPLICA_ASSIGNMENT; UNKNOWN_TOPIC_OR_PARTITION; INVALID_REQUEST for a topic listed
  twice). ``validate_only`` checks without creating. ``timeout_ms <= 0`` (not validate-only)
  creates the partitions but answers REQUEST_TIMED_OUT (7), as Kafka does.
- DeleteRecords: per partition, advance the log start offset to ``offset`` (``-1`` = the
  high watermark) and drop whole segments below it; the answer's ``low_watermark`` is the new
  log start offset. Errors: internal topics -> INVALID_TOPIC_EXCEPTION (17, "Cannot delete
  records of internal topic"); unknown partition -> UNKNOWN_TOPIC_OR_PARTITION (3); a
  partition this broker does not lead -> NOT_LEADER_OR_FOLLOWER (6); an offset beyond the
  high watermark or negative (other than -1) -> OFFSET_OUT_OF_RANGE (1); a topic whose
  ``cleanup.policy`` lacks ``delete`` -> POLICY_VIOLATION (44). ``low_watermark`` is -1 on
  error. A single-node broker needs no DelayedDeleteRecords: the answer is immediate.
- ElectLeaders: ``controller.elect_leaders`` per partition (v0: preferred only; null topic
  partitions = every partition, reporting only those where an election ran or failed).
  Results grouped by topic in request order.
- Authorization (with an authorizer): CreatePartitions needs ALTER on each topic,
  DeleteRecords DELETE on each topic (else TOPIC_AUTHORIZATION_FAILED for it), ElectLeaders
  ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every partition).

Version notes: CreatePartitions v0-v3 (v2+ flexible). DeleteRecords v0-v2 (v2 flexible).
ElectLeaders v0-v2 (v2 flexible): v1 ``election_type`` and top-level ``error_code``.
"""

from __future__ import annotations

from broker.handlers import authz, throttling
from broker.handlers.registry import handles
from broker.metadata_cache import INTERNAL_TOPICS
from controller.api import ELECTION_PREFERRED, CreatePartitionsTopic
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DELETE_RECORDS, CREATE_PARTITIONS, ELECT_LEADERS = 21, 37, 43
DeleteRecordsResponse = api.API_KEYS[DELETE_RECORDS].response_cls
CreatePartitionsResponse = api.API_KEYS[CREATE_PARTITIONS].response_cls
ElectLeadersResponse = api.API_KEYS[ELECT_LEADERS].response_cls

#: DeleteRecords offset meaning "up to the high watermark".
HIGH_WATERMARK = -1


# ----- CreatePartitions ----------------------------------------------------------------------

def create_partitions_error_response(request, version: int, error: KafkaError):
    return CreatePartitionsResponse(results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(
            name=t.name, error_code=int(error.code), error_message=error.message)
        for t in request.topics])


@handles(CREATE_PARTITIONS, 0, 3, error_response=create_partitions_error_response)
async def handle_create_partitions(ctx, request):
    validate_only = bool(request.validate_only)
    denied = authz.unauthorized(ctx, authz.AclOperation.ALTER, authz.ResourceType.TOPIC,
                                (t.name for t in request.topics))
    throttled, throttle_ms = set(), 0
    if not validate_only:
        cache = ctx.broker.metadata_cache
        throttled, throttle_ms = throttling.mutation_quota(ctx, 3, [
            (t.name, t.count - (cache.num_partitions(t.name) or t.count))
            for t in request.topics if t.name not in denied])
    wanted = [CreatePartitionsTopic(
        t.name, t.count,
        None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
        for t in request.topics if t.name not in denied | throttled]
    results = await ctx.broker.controller.create_partitions(wanted, validate_only=validate_only,
                                                           timeout_ms=request.timeout_ms) \
        if wanted else []
    out = [CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=t.name, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        for t in request.topics if t.name in denied]
    out += [CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=t.name, error_code=int(ErrorCode.THROTTLING_QUOTA_EXCEEDED),
        error_message="The throttling quota has been exceeded.")
        for t in request.topics if t.name in throttled]
    for r in results:
        code, message = int(r.error_code), r.error_message
        if code == 0 and not validate_only and request.timeout_ms <= 0:
            code, message = int(ErrorCode.REQUEST_TIMED_OUT), None
        out.append(CreatePartitionsResponse.CreatePartitionsTopicResult(
            name=r.name, error_code=code, error_message=message))
    return CreatePartitionsResponse(results=out, throttle_time_ms=throttle_ms)


# ----- DeleteRecords -------------------------------------------------------------------------

def delete_records_error_response(request, version: int, error: KafkaError):
    return DeleteRecordsResponse(topics=[
        DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=[
            DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1,
                error_code=int(error.code))
            for p in t.partitions])
        for t in request.topics])


def delete_records_on_leader(replica_manager, topic: str, partition: int, offset: int) -> int:
    """Advance ``topic-partition``'s log start offset; returns the new low watermark or
    raises KafkaError with the codes listed in the module docstring."""
    if topic in INTERNAL_TOPICS:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Cannot delete records of internal topic {topic}")
    p = replica_manager.get_partition_or_error(topic, partition)
    if not p.is_leader:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                         f"broker is not the leader of {topic}-{partition}")
    log = p.log
    if "delete" not in log.config.cleanup_policy:
        raise KafkaError(ErrorCode.POLICY_VIOLATION,
                         f"Records of partition {topic}-{partition} can not be deleted due "
                         "to the configured policy")
    target = p.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"Cannot delete records before offset {offset}")
    return log.delete_records_before(target)


@handles(DELETE_RECORDS, 0, 2, error_response=delete_records_error_response)
def handle_delete_records(ctx, request):
    rm = ctx.broker.replica_manager
    denied = authz.unauthorized(ctx, authz.AclOperation.DELETE, authz.ResourceType.TOPIC,
                                (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            res = DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1)
            if t.name in denied:
                res.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                parts.append(res)
                continue
            try:
                res.low_watermark = delete_records_on_leader(rm, t.name, p.partition_index,
                                                             p.offset)
            except KafkaError as e:
                res.error_code = int(e.code)
            parts.append(res)
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name,
                                                                     partitions=parts))
    return DeleteRecordsResponse(topics=topics)


# ----- ElectLeaders --------------------------------------------------------------------------

def _requested(request) -> list[tuple[str, int]] | None:
    if request.topic_partitions is None:
        return None
    return [(t.topic, p) for t in request.topic_partitions for p in t.partitions]


def elect_leaders_error_response(request, version: int, error: KafkaError):
    wanted = _requested(request) or []
    by_topic: dict[str, list] = {}
    for topic, p in wanted:
        by_topic.setdefault(topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=p, error_code=int(error.code), error_message=error.message))
    return ElectLeadersResponse(
        error_code=int(error.code) if version >= 1 else 0,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=ps)
            for t, ps in by_topic.items()])


@handles(ELECT_LEADERS, 0, 2, error_response=elect_leaders_error_response)
async def handle_elect_leaders(ctx, request):
    if not authz.authorize_cluster(ctx, authz.AclOperation.ALTER):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    election_type = request.election_type if ctx.api_version >= 1 else ELECTION_PREFERRED
    results = await ctx.broker.controller.elect_leaders(election_type, _requested(request))
    by_topic: dict[str, list] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=r.partition, error_code=int(r.error_code),
            error_message=r.error_message))
    return ElectLeadersResponse(replica_election_results=[
        ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=ps)
        for t, ps in by_topic.items()])
