# Behaviour: ListOffsets (api key 2) answers, per partition led here, an offset for a
#   timestamp: -2 earliest (log start offset), -4 earliest local (the same: no tiered
#   storage), -1 latest (consumers: the high watermark, read_committed: the last stable
#   offset; replicas: the log end offset), -3 max timestamp (KIP-734: offset and timestamp of
#   the record with the largest timestamp), -5 latest tiered and -6 earliest pending upload
#   (offset -1, epoch -1: what Kafka answers for a topic without tiered storage), or the
#   first offset whose timestamp is >= the given one (offset -1, timestamp -1 when none is,
#   or when it is not yet below the HW/LSO). Leader epoch (v4+) is the epoch of the batch
#   holding the offset (the current epoch for latest). replica_id -2 (debugging) may read a
#   follower; anyone else needs the leader. Errors per partition:
#   UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH /
#   UNKNOWN_LEADER_EPOCH (current_leader_epoch, v4+), INVALID_REQUEST (duplicate partition
#   in one request, v1+, as Kafka; or an unknown negative timestamp), TOPIC_AUTHORIZATION_FAILED
#   (an authorizer denied DESCRIBE on the topic), UNSUPPORTED_VERSION (a special timestamp
#   the request's version does not have, as Kafka 4.x's ReplicaManager answers).
# Version notes: v0 answers a legacy `old_style_offsets` list (up to max_num_offsets:
#   latest -> HW then segment base offsets descending; earliest -> log start; else base
#   offsets of segments not newer than the timestamp); v1+ one (timestamp, offset); v2+
#   isolation_level; v4+ current_leader_epoch / leader_epoch; v6+ flexible; v7 max timestamp
#   (-3); v8 earliest local (-4); v9 latest tiered (-5); v10 timeout_ms (ignored: nothing
#   to wait for); v11 earliest pending upload (-6, KIP-1023).

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import handles
from broker.partition import READ_UNCOMMITTED
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import ListOffsetsRequest, ListOffsetsResponse

API_KEY = 2
MIN_VERSION, MAX_VERSION = 0, 11
# special timestamp -> the first version that has it (KIP-734, KIP-405, KIP-1005, KIP-1023)
TIMESTAMP_MIN_VERSION = {-3: 7, -4: 8, -5: 9, -6: 11}
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2

_TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
_PartResp = ListOffsetsResponse.ListOffsetsPartitionResponse


def _error_part(index: int, code: int) -> _PartResp:
    return _PartResp(partition_index=index, error_code=code, old_style_offsets=[],
                     timestamp=-1, offset=-1, leader_epoch=-1)


def error_response(req: ListOffsetsRequest, version: int, error: KafkaError
                   ) -> ListOffsetsResponse:
    """Every partition of the request answers `error.code`."""
    return ListOffsetsResponse(topics=[
        _TopicResp(name=t.name, partitions=[_error_part(p.partition_index, error.code)
                                            for p in t.partitions])
        for t in req.topics])


@handles(API_KEY, MIN_VERSION, MAX_VERSION, error_response=error_response)
def handle_list_offsets(ctx, req: ListOffsetsRequest) -> ListOffsetsResponse:
    version = ctx.api_version
    rm = ctx.broker.replica_manager
    replica_id = req.replica_id
    isolation = (req.isolation_level if version >= 2 else READ_UNCOMMITTED) \
        if replica_id == CONSUMER_REPLICA_ID else None
    only_leader = replica_id != DEBUGGING_REPLICA_ID
    seen: set[tuple[str, int]] = set()
    duplicates = set()
    if version >= 1:
        for t in req.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if tp in seen:
                    duplicates.add(tp)
                seen.add(tp)
    denied = authz.unauthorized(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC,
                                (t.name for t in req.topics))
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            index = p.partition_index
            if t.name in denied:
                parts.append(_error_part(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if (t.name, index) in duplicates:
                parts.append(_error_part(index, ErrorCode.INVALID_REQUEST))
                continue
            if version > 0 and version < TIMESTAMP_MIN_VERSION.get(p.timestamp, 0):
                parts.append(_error_part(index, ErrorCode.UNSUPPORTED_VERSION))
                continue
            try:
                part = rm.get_partition_or_error(t.name, index)
                if version == 0:
                    part.check_leader_epoch(-1, only_leader)
                    offsets = part.legacy_offsets_before(p.timestamp, p.max_num_offsets,
                                                         replica=isolation is None)
                    parts.append(_PartResp(partition_index=index, error_code=ErrorCode.NONE,
                                           old_style_offsets=offsets))
                    continue
                ts, offset, epoch = part.fetch_offset_for_timestamp(
                    p.timestamp, isolation, p.current_leader_epoch if version >= 4 else -1,
                    only_leader)
            except KafkaError as e:
                parts.append(_error_part(index, e.code))
                continue
            parts.append(_PartResp(partition_index=index, error_code=ErrorCode.NONE,
                                   timestamp=ts, offset=offset, leader_epoch=epoch))
        topics.append(_TopicResp(name=t.name, partitions=parts))
    return ListOffsetsResponse(topics=topics)
