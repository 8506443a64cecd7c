"""Metadata (api key 3): brokers, cluster id, controller and topic/partition metadata.

Behaviour (Kafka's ``KafkaApis.handleTopicMetadataRequest`` in ZooKeeper mode):
- brokers: the live brokers' endpoints for the listener the request arrived on;
  ``cluster_id`` and ``controller_id`` (-1 before the first UpdateMetadata) from the
  MetadataCache;
- topics: ``null`` (v1+) or an empty list in v0 = every topic; an empty list (v1+) = none;
  topic ids (v12) are looked up (unknown -> UNKNOWN_TOPIC_ID with a null name); in v10/v11
  a null name or a non-zero id is INVALID_REQUEST (whole request);
- an unknown topic is created when ``auto.create.topics.enable`` and the request allows it
  (``allow_auto_topic_creation``, v4+; always before): ``controller.auto_create_topics`` with
  ``num.partitions``/``default.replication.factor`` (internal topics with their own counts
  and configs), answered LEADER_NOT_AVAILABLE (5) with no partitions even when the creation
  succeeded or raced (TOPIC_ALREADY_EXISTS), other creation errors as they are; bounded per
  request and rate-limited (``broker.auto_topic_creation``: the rest UNKNOWN_TOPIC_OR_PARTITION,
  or THROTTLING_QUOTA_EXCEEDED once the client's controller mutation quota is used up, with
  ``throttle_time_ms``); without
  auto-creation an unknown name is UNKNOWN_TOPIC_OR_PARTITION (3), a bad name
  INVALID_TOPIC_EXCEPTION (17);
- partition errors from the MetadataCache: LEADER_NOT_AVAILABLE (no live leader),
  LISTENER_NOT_FOUND (v6+, the leader lacks this listener), REPLICA_NOT_AVAILABLE (v0 only);
- authorization (with an authorizer): topics need DESCRIBE; all-topics requests silently
  leave the others out, named ones answer TOPIC_AUTHORIZATION_FAILED with the name and a
  zero topic id (any version, v12 included), topics asked for by id (v12) with the id and a
  null name (Kafka's ``unauthorizedForDescribeTopicMetadata``); auto-creation needs CREATE on the cluster or on
  the topic (else TOPIC_AUTHORIZATION_FAILED);
- authorized operations (v8+, when asked): the bit field of what the principal may do on
  each topic (``broker.handlers.authz.authorized_operations``; every operation of the type
  without an authorizer), the cluster's only with DESCRIBE on it (else 0); otherwise
  -2147483648 (the schema default).

Version notes: v0-v13 (v9+ flexible). v1 adds controller id, is_internal, rack, null topics;
v2 cluster id; v4 allow_auto_topic_creation; v5 offline replicas; v7 leader epoch; v8
authorized operations (cluster ops only up to v10); v10 topic ids in responses; v12 topic
ids in requests; v13 a top-level error_code (KIP-1102), set only by the error response, as
Kafka's ``getErrorResponse`` does (a broker that answers never asks for a re-bootstrap).
"""

from __future__ import annotations

import asyncio
import functools
import uuid

from broker.auto_topic_creation import auto_topic_creator
from broker.handlers import authz
from broker.handlers.metadata_encoding import (
    DIRECT_FROM,
    MetadataResponseWithEncodedTopics,
    cached_entry,
    encode_topic,
    encode_topic_direct,
)
from broker.handlers.registry import handles
from broker.metadata_cache import INTERNAL_TOPICS
from common.loop_slice import LoopSlice
from controller.admin_validation import validate_topic_name
from controller.api import CreatableTopic
from protocol import api
from protocol.errors import ErrorCode, KafkaError

METADATA = 3
MetadataResponse = api.API_KEYS[METADATA].response_cls
ZERO_UUID = uuid.UUID(int=0)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
LOOKUP_CHUNK = 1000

# AclOperation codes (KIP-430): READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def internal_topic_spec(name: str, config) -> CreatableTopic:
    """How Kafka creates a topic: internal ones with their own counts and configs
    (``offsets.topic.*``, ``transaction.state.log.*``, ``share.coordinator.state.topic.*``), others with -1 (broker defaults)."""
    if name == "__consumer_offsets":
        return CreatableTopic(name, config.offsets_topic_num_partitions,
                              config.offsets_topic_replication_factor, None, {
                                  "cleanup.policy": "compact",
                                  "compression.type": "producer",
                                  "segment.bytes": str(config.get("offsets.topic.segment.bytes")),
                              })
    if name == "__transaction_state":
        return CreatableTopic(name, config.transaction_state_log_num_partitions,
                              config.get("transaction.state.log.replication.factor"), None, {
                                  "cleanup.policy": "compact",
                                  "compression.type": "uncompressed",
                                  "min.insync.replicas": str(
                                      config.get("transaction.state.log.min.isr")),
                                  "segment.bytes": str(
                                      config.get("transaction.state.log.segment.bytes")),
                                  "unclean.leader.election.enable": "false",
                              })
    if name == "__share_group_state":  # KIP-932: pruned with DeleteRecords, never compacted
        return CreatableTopic(name, config.get("share.coordinator.state.topic.num.partitions"),
                              config.get("share.coordinator.state.topic.replication.factor"),
                              None, {
                                  "cleanup.policy": "delete",
                                  "retention.ms": "-1",
                                  "compression.type": "producer",
                                  "min.insync.replicas": str(
                                      config.get("share.coordinator.state.topic.min.isr")),
                                  "segment.bytes": str(config.get(
                                      "share.coordinator.state.topic.segment.bytes")),
                                  "unclean.leader.election.enable": "false",
                              })
    return CreatableTopic(name, -1, -1)


def _topic(error: int, name: str | None, topic_id: uuid.UUID | None = None,
           is_internal: bool = False, partitions=()) -> MetadataResponse.MetadataResponseTopic:
    return MetadataResponse.MetadataResponseTopic(
        error_code=int(error), name=name, topic_id=topic_id or ZERO_UUID,
        is_internal=is_internal, partitions=list(partitions))


def error_response(request, version: int, error: KafkaError):
    """Kafka's ``MetadataRequest.getErrorResponse``: every requested topic with the code."""
    topics = [_topic(error.code, t.name if t.name is not None or version >= 12 else "",
                     t.topic_id) for t in (request.topics or [])]
    return MetadataResponse(topics=topics, error_code=int(error.code))


def _validate_request(request, version: int) -> None:
    if request.topics is None or version >= 12:
        return
    for t in request.topics:
        if t.name is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Topic name can not be null for version {version}")
        if version >= 10 and t.topic_id is not None and t.topic_id != ZERO_UUID:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Topic IDs are not supported in requests for version {version}")


async def _auto_create(ctx, names: list[str]) -> tuple[list, int]:
    """Create ``names`` (Kafka's AutoTopicCreationManager, ZooKeeper flavour, bounded and
    rate-limited by ``broker.auto_topic_creation``); also the throttle time (ms)."""
    broker = ctx.broker
    out = []
    valid: list[CreatableTopic] = []
    slicer = LoopSlice()  # a storm names 100,000 topics: other connections keep running
    for name in names:
        await slicer.tick()
        try:
            validate_topic_name(name)
        except KafkaError:
            out.append(_topic(ErrorCode.INVALID_TOPIC_EXCEPTION, name, None,
                              name in INTERNAL_TOPICS))
            continue
        valid.append(internal_topic_spec(name, broker.config))
    if not valid:
        return out, 0
    results, throttle_ms = await auto_topic_creator(broker).create(ctx, valid)
    for name, code in results:
        await slicer.tick()
        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.REQUEST_TIMED_OUT):
            code = ErrorCode.LEADER_NOT_AVAILABLE
        out.append(_topic(code, name, None, name in INTERNAL_TOPICS))
    return out, throttle_ms


async def _lookup(cache, names: list[str] | None, listener: str, version: int) -> list:
    """The MetadataCache's answer, a thousand names at a time with the loop free in between
    (a storm names 100,000 topics)."""
    kw = {"error_unavailable_endpoints": version == 0,
          "error_unavailable_listeners": version >= 6}
    if names is None or len(names) <= LOOKUP_CHUNK:
        return cache.get_topic_metadata(names, listener, **kw)
    found = []
    for i in range(0, len(names), LOOKUP_CHUNK):
        found += cache.get_topic_metadata(names[i:i + LOOKUP_CHUNK], listener, **kw)
        await asyncio.sleep(0)
    return found


def _topic_entry(tm) -> MetadataResponse.MetadataResponseTopic:
    """The response entry of a found topic (a MetadataCache ``TopicMetadata``)."""
    return _topic(tm.error_code, tm.name, tm.topic_id, tm.is_internal, [
        MetadataResponse.MetadataResponsePartition(
            error_code=p.error_code, partition_index=p.partition, leader_id=p.leader_id,
            leader_epoch=p.leader_epoch, replica_nodes=p.replica_nodes,
            isr_nodes=p.isr_nodes, offline_replicas=p.offline_replicas)
        for p in tm.partitions])


async def _encoded_entries(cache, names: list[str] | None, listener: str, version: int
                           ) -> tuple[list, set[str]]:
    """(the found topics' entries, their names): each entry's encoding at ``version`` from
    the topic's memo in the MetadataCache, encoded there first when missing
    (:mod:`broker.handlers.metadata_encoding`: from v7 straight from the cache's partition
    states, `encode_topic_direct`); the loop is free every few ms (`LoopSlice`): after an
    UpdateMetadata of 100,000 partitions every one is encoded again."""
    kw = {"error_unavailable_endpoints": version == 0,
          "error_unavailable_listeners": version >= 6}
    key = (version, listener, version == 0, version >= 6)
    out: list = []
    known: set[str] = set()
    slicer = LoopSlice()
    reachable: list[set[int]] = []  # worked out once, by the first topic encoded

    def build(name: str) -> bytes:
        if version < DIRECT_FROM:
            return encode_topic(_topic_entry(cache.get_topic_metadata([name], listener, **kw)[0]),
                                version)
        if not reachable:
            reachable.append(cache.reachable_broker_ids(listener))
        return encode_topic_direct(
            _topic(ErrorCode.NONE, name, cache.topic_id(name), name in INTERNAL_TOPICS),
            cache.topic_partition_states(name), reachable[0], cache.alive_broker_ids(),
            version, version >= 6)
    for name in cache.all_topics() if names is None else names:
        await slicer.tick()
        memo = cache.topic_memo(name)
        if memo is None:
            continue
        known.add(name)
        out.append(cached_entry(memo, key, functools.partial(build, name)))
    return out, known


def _unknown(name: str):
    try:
        validate_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except KafkaError:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION
    return _topic(code, name, None, name in INTERNAL_TOPICS)


def _authorize_describe(ctx, names: list[str] | None, by_id: bool):
    """(names the principal may describe, TOPIC_AUTHORIZATION_FAILED entries): all topics
    are filtered silently; named topics are refused by name (by id for topic-id requests)."""
    cache = ctx.broker.metadata_cache
    if names is None:
        allowed = sorted(n for n in cache.all_topics() if not authz.unauthorized(
            ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC, [n],
            log_if_denied=False))
        return allowed, []
    denied = authz.unauthorized(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC,
                                names, log_if_denied=not by_id)
    if not denied:
        return names, []
    refused = [_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None if by_id else n,
                      cache.topic_id(n) if by_id else None) for n in names if n in denied]
    return [n for n in names if n not in denied], refused


@handles(METADATA, 0, 13, error_response=error_response)
async def handle_metadata(ctx, request):
    version = ctx.api_version
    _validate_request(request, version)
    broker = ctx.broker
    cache = broker.metadata_cache
    listener = broker.listener_name(ctx.listener)
    all_topics = request.topics is None or (version == 0 and not request.topics)

    extra = []  # UNKNOWN_TOPIC_ID entries, first as Kafka lists them
    by_id = False  # v12 requests that name topics by id are answered by id
    if all_topics:
        names: list[str] | None = None
    else:
        ids = [t.topic_id for t in request.topics
               if t.topic_id is not None and t.topic_id != ZERO_UUID]
        if ids:
            by_id = True
            names = []
            for tid in dict.fromkeys(ids):
                name = cache.topic_name(tid)
                if name is None:
                    extra.append(_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, tid))
                else:
                    names.append(name)
        else:
            names = list(dict.fromkeys(t.name for t in request.topics))

    refused = []  # TOPIC_AUTHORIZATION_FAILED entries
    throttle_ms = 0  # the client's controller mutation quota (auto-creation)
    if authz.enabled(ctx):
        names, refused = _authorize_describe(ctx, names, by_id)
    topics = []
    with_ops = version >= 8 and request.include_topic_authorized_operations
    if names is None or names:
        if with_ops:  # entries to fill in below: built, not taken from the memo
            found = await _lookup(cache, names, listener, version)
            topics = [_topic_entry(tm) for tm in found]
            known = {tm.name for tm in found}
        else:
            topics, known = await _encoded_entries(cache, names, listener, version)
        if names is not None and len(known) < len(names):
            missing = [n for n in names if n not in known]
            allow = version < 4 or request.allow_auto_topic_creation
            if allow and broker.config.auto_create_topics_enable and broker.controller:
                if authz.enabled(ctx) and not authz.authorize_cluster(
                        ctx, authz.AclOperation.CREATE, log_if_denied=False):
                    cannot = authz.unauthorized(ctx, authz.AclOperation.CREATE,
                                                authz.ResourceType.TOPIC, missing)
                    refused += [_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, n, None,
                                       n in INTERNAL_TOPICS) for n in missing if n in cannot]
                    missing = [n for n in missing if n not in cannot]
                created, throttle_ms = await _auto_create(ctx, missing)
                topics += created
            else:
                topics += [_unknown(n) for n in missing]

    topics += refused
    if version >= 8 and request.include_topic_authorized_operations:
        for t in topics:
            t.topic_authorized_operations = authz.authorized_operations(
                ctx, authz.ResourceType.TOPIC, t.name) if t.name is not None else 0
    cluster_ops = AUTHORIZED_OPERATIONS_OMITTED
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_ops = authz.authorized_operations(ctx, authz.ResourceType.CLUSTER,
                                                  authz.CLUSTER_NAME) \
            if authz.authorize_cluster(ctx, authz.AclOperation.DESCRIBE) else 0

    controller_id = cache.controller_id
    return MetadataResponseWithEncodedTopics(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=n.id, host=n.host, port=n.port,
                                                         rack=n.rack)
                 for n in cache.alive_broker_nodes(listener)],
        cluster_id=cache.cluster_id,
        controller_id=-1 if controller_id is None else controller_id,
        topics=extra + topics,
        cluster_authorized_operations=cluster_ops,
        throttle_time_ms=throttle_ms)
