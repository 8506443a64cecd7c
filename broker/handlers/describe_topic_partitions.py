"""DescribeTopicPartitions (api key 75, KIP-966): topic and partition metadata, paginated.

Behaviour (Kafka's ``DescribeTopicPartitionsRequestHandler`` and
``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``):
- ``topics`` empty = every topic; otherwise the named ones. Topics are answered in name
  order, starting at the ``cursor`` topic (names sorting before it are skipped) and, for that
  topic, at the cursor's ``partition_index``.
- At most ``min(response_partition_limit, max.request.partition.size.limit)`` partitions
  (at least 1) are returned. When a topic is cut short, ``next_cursor`` names it and its
  next partition; when the limit is reached exactly at a topic boundary and more topics
  follow, ``next_cursor`` is the next topic at partition 0. Otherwise ``next_cursor`` is
  null.
- A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (an invalid name
  INVALID_TOPIC_EXCEPTION) with no partitions; with ``topics`` empty nothing is reported for
  it. Topics are never auto-created.
- A cursor whose topic is not among the named topics, or whose partition is negative, fails
  the whole request with INVALID_REQUEST (error in every named topic, as Kafka's
  ``getErrorResponse``).
- Partitions carry leader (-1 when it is not alive), leader epoch, replicas, ISR, offline
  replicas; ``eligible_leader_replicas`` / ``last_known_elr`` are empty (no KIP-966 ELR in
  ZooKeeper mode). ``topic_authorized_operations`` is every topic operation (no authorizer).

Version notes: v0 only (flexible). Kafka 3.9 serves it only in KRaft mode; Kafka 4.0's
``kafka-topics.sh --describe`` needs it, so Josef serves it in every mode.
"""

from __future__ import annotations

import uuid

from broker.handlers import authz
from broker.handlers.registry import handles
from broker.metadata_cache import INTERNAL_TOPICS
from controller.admin_validation import validate_topic_name
from protocol import api
from protocol.errors import ErrorCode, KafkaError

API_KEY = 75
_Response = api.API_KEYS[API_KEY].response_cls
_Topic = _Response.DescribeTopicPartitionsResponseTopic
_Partition = _Response.DescribeTopicPartitionsResponsePartition
ZERO_UUID = uuid.UUID(int=0)


def error_response(request, version: int, error: KafkaError):
    return _Response(topics=[_Topic(error_code=int(error.code), name=t.name,
                                    topic_id=ZERO_UUID, partitions=[])
                             for t in request.topics])


def _missing(name: str) -> object:
    try:
        validate_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except KafkaError:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION
    return _Topic(error_code=int(code), name=name, topic_id=ZERO_UUID,
                  is_internal=name in INTERNAL_TOPICS, partitions=[])


@handles(API_KEY, 0, 0, error_response=error_response)
def handle_describe_topic_partitions(ctx, request):
    broker = ctx.broker
    cache = broker.metadata_cache
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = [n for n in cache.all_topics() if n >= cursor_topic]
    else:
        names = list(dict.fromkeys(t.name for t in request.topics if t.name >= cursor_topic))
        if cursor is not None and cursor.topic_name not in names:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "DescribeTopicPartitionsRequest topic list should contain the "
                             f"cursor topic: {cursor.topic_name}")
    if cursor is not None and cursor.partition_index < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"DescribeTopicPartitionsRequest cursor partition must be valid: "
                         f"{cursor.topic_name}-{cursor.partition_index}")
    names.sort()
    limit = broker.config.get("max.request.partition.size.limit")
    remaining = max(min(limit, request.response_partition_limit), 1)
    listener = broker.listener_name(ctx.listener)
    topics = []
    next_cursor = None
    for name in names:
        if remaining <= 0:
            next_cursor = _Response.Cursor(topic_name=name, partition_index=0)
            break
        if not authz.authorize(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC, name,
                               log_if_denied=not fetch_all):
            if not fetch_all:  # named topics are refused; all-topics requests skip them
                topics.append(_Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                     name=name, topic_id=ZERO_UUID, partitions=[]))
            continue
        found = cache.get_topic_metadata([name], listener)
        if not found:
            if not fetch_all:
                topics.append(_missing(name))
            continue
        tm = found[0]
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        parts = sorted(tm.partitions, key=lambda p: p.partition)
        chosen = [p for p in parts if p.partition >= start][:remaining]
        topics.append(_Topic(
            error_code=0, name=name, topic_id=tm.topic_id or ZERO_UUID,
            is_internal=tm.is_internal, topic_authorized_operations=authz.authorized_operations(
                ctx, authz.ResourceType.TOPIC, name),
            partitions=[_Partition(error_code=0, partition_index=p.partition,
                                   leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                                   replica_nodes=p.replica_nodes, isr_nodes=p.isr_nodes,
                                   offline_replicas=p.offline_replicas,
                                   eligible_leader_replicas=[], last_known_elr=[])
                        for p in chosen]))
        remaining -= len(chosen)
        later = [p for p in parts if p.partition >= start][len(chosen):]
        if later:
            next_cursor = _Response.Cursor(topic_name=name, partition_index=later[0].partition)
            break
    return _Response(topics=topics, next_cursor=next_cursor)
