# Behaviour: OffsetForLeaderEpoch (api key 23) answers, per partition, the end offset of the
#   requested leader epoch from the leader-epoch cache (KIP-101/KIP-279): the latest epoch
#   -> the log end offset; an older epoch -> the largest epoch <= it and the start offset of
#   the next epoch; an unknown (newer) epoch or an empty cache -> epoch -1, offset -1.
#   Consumers use it to detect log truncation after a leader change (KIP-320), followers to
#   find where to truncate. Only the leader answers, whatever the replica_id (Kafka's
#   ReplicaManager.lastOffsetForLeaderEpoch: fetchOnlyFromLeader = true; v0-v2 requests, e.g.
#   librdkafka's, carry no replica_id): a lagging follower's epoch cache would tell a consumer
#   its position was truncated away. Errors per partition:
#   UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH /
#   UNKNOWN_LEADER_EPOCH (current_leader_epoch, v2+), TOPIC_AUTHORIZATION_FAILED (an authorizer
#   denied CLUSTER_ACTION on the cluster and DESCRIBE on the topic).
# Version notes: v1+ leader_epoch in the response; v2+ current_leader_epoch; v3+ replica_id;
#   v4+ flexible.

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import handles
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

API_KEY = 23
MIN_VERSION, MAX_VERSION = 0, 4

_TopicResp = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_PartResp = OffsetForLeaderEpochResponse.EpochEndOffset


def error_response(req: OffsetForLeaderEpochRequest, version: int, error: KafkaError
                   ) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(topics=[
        _TopicResp(topic=t.topic, partitions=[
            _PartResp(error_code=error.code, partition=p.partition, leader_epoch=-1,
                      end_offset=-1) for p in t.partitions])
        for t in req.topics])


@handles(API_KEY, MIN_VERSION, MAX_VERSION, error_response=error_response)
def handle_offset_for_leader_epoch(ctx, req: OffsetForLeaderEpochRequest
                                   ) -> OffsetForLeaderEpochResponse:
    version = ctx.api_version
    rm = ctx.broker.replica_manager
    denied: set[str] = set()
    if authz.enabled(ctx) and not authz.authorize_cluster(
            ctx, authz.AclOperation.CLUSTER_ACTION, log_if_denied=False):
        denied = authz.unauthorized(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC,
                                    (t.topic for t in req.topics))
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.topic in denied:
                parts.append(_PartResp(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                       partition=p.partition, leader_epoch=-1, end_offset=-1))
                continue
            try:
                part = rm.get_partition_or_error(t.topic, p.partition)
                epoch, end = part.last_offset_for_leader_epoch(
                    p.current_leader_epoch if version >= 2 else -1, p.leader_epoch, True)
            except KafkaError as e:
                parts.append(_PartResp(error_code=e.code, partition=p.partition,
                                       leader_epoch=-1, end_offset=-1))
                continue
            parts.append(_PartResp(error_code=0, partition=p.partition, leader_epoch=epoch,
                                   end_offset=end))
        topics.append(_TopicResp(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(topics=topics)
