"""CreateTopics (api key 19) and DeleteTopics (api key 20): topic admin through the controller.

Behaviour (Kafka's ZooKeeper-mode ``KafkaApis`` + ``ZkAdminManager``; this broker is always
the controller in embedded mode):
- CreateTopics: every topic goes to ``controller.create_topics`` (one result per topic, in
  request order; codes INVALID_REQUEST for duplicates or counts given with an assignment,
  INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
  INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG). ``-1``
  partitions / replication factor take ``num.partitions`` / ``default.replication.factor``
  (KIP-464). ``validate_only`` checks without creating. ``timeout_ms <= 0`` (not
  validate-only) creates the topic but answers REQUEST_TIMED_OUT (7), as Kafka does;
  librdkafka hides that code for its non-blocking create. v5+ results carry the topic's
  partition count, replication factor and every topic config with its source (1 topic
  override, 4 set in server.properties, 5 default); on error those are -1 / -1 / null.
- ZooKeeper mode: both go to the controller; another broker answers NOT_CONTROLLER (41) for
  every topic. The controller waits (up to ``timeout_ms``) until its metadata shows the
  topics' leaders (create) or no longer shows the topics (delete); REQUEST_TIMED_OUT after.
- DeleteTopics: by name (v0-v5 ``topic_names``, v6 ``topics[].name``) or by topic id (v6).
  ``delete.topic.enable=false`` -> TOPIC_DELETION_DISABLED (73) per topic (v3+), or the
  whole request INVALID_REQUEST before v3. A v6 entry with both a name and an id makes the
  request INVALID_REQUEST; an unknown id -> UNKNOWN_TOPIC_ID (100), an unknown name ->
  UNKNOWN_TOPIC_OR_PARTITION (3). Returns after the deletion was applied (metadata gone, logs
  renamed ``-delete``); ``timeout_ms <= 0`` answers REQUEST_TIMED_OUT for deleted topics.
- Authorization (with an authorizer): creating needs CREATE on the cluster or on the topic
  (else TOPIC_AUTHORIZATION_FAILED; v5+ configs only with DESCRIBE_CONFIGS on the topic,
  else ``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED); deleting needs DESCRIBE and
  DELETE on the topic (checked before its existence, so nothing is disclosed).
- controller_mutation_rate (KIP-599): partitions created/deleted count against the quota;
  from CreateTopics v6 / DeleteTopics v5 a topic asked for once the quota is used up answers
  THROTTLING_QUOTA_EXCEEDED; ``throttle_time_ms`` tells when to retry.

Version notes: CreateTopics v0-v7 (v5+ flexible): v1 validate_only + error_message, v4 -1
defaults, v5 num_partitions/replication_factor/configs (+ tagged topic_config_error_code),
v7 topic_id. DeleteTopics v0-v6 (v4+ flexible): v5 error_message, v6 topic ids.
"""

from __future__ import annotations

import uuid

from broker.config import ConfigSource, KafkaConfig
from broker.handlers import authz, throttling
from broker.handlers.registry import handles
from controller.api import CreatableTopic
from protocol import api
from protocol.errors import ErrorCode, KafkaError

CREATE_TOPICS, DELETE_TOPICS = 19, 20
CreateTopicsResponse = api.API_KEYS[CREATE_TOPICS].response_cls
DeleteTopicsResponse = api.API_KEYS[DELETE_TOPICS].response_cls
ZERO_UUID = uuid.UUID(int=0)

#: topic config -> the broker keys that set its default (Kafka's synonyms), highest first.
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("log.cleanup.policy",),
    "compression.type": ("compression.type",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "max.message.bytes": ("message.max.bytes",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "min.insync.replicas": ("min.insync.replicas",),
    "preallocate": ("log.preallocate",),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.bytes": ("log.segment.bytes",),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
}


def topic_config_entries(config: KafkaConfig, overrides: dict[str, str]
                         ) -> list[tuple[str, str | None, ConfigSource]]:
    """Every config of a topic as ``(name, value, source)``, sorted by name: the override
    (TOPIC_CONFIG) or the broker default (STATIC_BROKER_CONFIG when a synonym is set in
    server.properties, else DEFAULT_CONFIG). Also used for DescribeConfigs of topics."""
    defaults = config.topic_config_defaults()
    out = []
    for name in sorted(set(defaults) | set(overrides)):
        if name in overrides:
            out.append((name, overrides[name], ConfigSource.TOPIC_CONFIG))
            continue
        synonyms = TOPIC_CONFIG_SYNONYMS.get(name, ())
        explicit = any(config.is_set(k) for k in synonyms)
        out.append((name, defaults.get(name),
                    ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG))
    return out


# ----- CreateTopics ----------------------------------------------------------------------------

def create_topics_error_response(request, version: int, error: KafkaError):
    return CreateTopicsResponse(topics=[
        CreateTopicsResponse.CreatableTopicResult(
            name=t.name, error_code=int(error.code), error_message=error.message)
        for t in request.topics])


def _creatable(t) -> CreatableTopic:
    assignment = None
    if t.assignments:
        assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
    return CreatableTopic(t.name, t.num_partitions, t.replication_factor, assignment,
                          {c.name: c.value for c in t.configs})


@handles(CREATE_TOPICS, 0, 7, error_response=create_topics_error_response)
async def handle_create_topics(ctx, request):
    broker = ctx.broker
    version = ctx.api_version
    validate_only = bool(request.validate_only) and version >= 1
    denied: set[str] = set()
    if authz.enabled(ctx) and not authz.authorize_cluster(ctx, authz.AclOperation.CREATE,
                                                          log_if_denied=False):
        denied = authz.unauthorized(ctx, authz.AclOperation.CREATE, authz.ResourceType.TOPIC,
                                    (t.name for t in request.topics))
    no_configs = authz.unauthorized(ctx, authz.AclOperation.DESCRIBE_CONFIGS,
                                    authz.ResourceType.TOPIC, (t.name for t in request.topics),
                                    log_if_denied=False)
    throttled, throttle_ms = set(), 0
    if not validate_only:
        throttled, throttle_ms = throttling.mutation_quota(ctx, 6, [
            (t.name, t.num_partitions if t.num_partitions > 0 else
             len(t.assignments) or broker.config.num_partitions)
            for t in request.topics if t.name not in denied])
    results = await broker.controller.create_topics(
        [_creatable(t) for t in request.topics if t.name not in denied | throttled],
        validate_only=validate_only, timeout_ms=request.timeout_ms)
    out = [CreateTopicsResponse.CreatableTopicResult(
        name=t.name, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        error_message="Authorization failed.") for t in request.topics if t.name in denied]
    out += [CreateTopicsResponse.CreatableTopicResult(
        name=t.name, error_code=int(ErrorCode.THROTTLING_QUOTA_EXCEEDED),
        error_message="The throttling quota has been exceeded.")
        for t in request.topics if t.name in throttled]
    for r in results:
        code, message = r.error_code, r.error_message
        ok = code == ErrorCode.NONE
        if ok and not validate_only and request.timeout_ms <= 0:
            code, message = int(ErrorCode.REQUEST_TIMED_OUT), None
        res = CreateTopicsResponse.CreatableTopicResult(
            name=r.name, error_code=int(code), error_message=message)
        if ok:
            res.topic_id = r.topic_id or ZERO_UUID
            if version >= 5 and r.name in no_configs:
                res.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif version >= 5:
                res.num_partitions = r.num_partitions
                res.replication_factor = r.replication_factor
                res.configs = [
                    CreateTopicsResponse.CreatableTopicConfigs(
                        name=name, value=value, read_only=False, config_source=int(source),
                        is_sensitive=False)
                    for name, value, source in topic_config_entries(broker.config, r.configs)]
        out.append(res)
    return CreateTopicsResponse(topics=out, throttle_time_ms=throttle_ms)


# ----- DeleteTopics ----------------------------------------------------------------------------

def _requested(request, version: int) -> list[tuple[str | None, uuid.UUID]]:
    if version >= 6:
        return [(t.name, t.topic_id or ZERO_UUID) for t in request.topics]
    return [(name, ZERO_UUID) for name in request.topic_names]


def _delete_authorization(ctx, name: str) -> int:
    """Kafka's DeleteTopics checks: DESCRIBE, then DELETE on the topic."""
    for op in (authz.AclOperation.DESCRIBE, authz.AclOperation.DELETE):
        if not authz.authorize(ctx, op, authz.ResourceType.TOPIC, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return 0


def delete_topics_error_response(request, version: int, error: KafkaError):
    return DeleteTopicsResponse(responses=[
        DeleteTopicsResponse.DeletableTopicResult(
            name=name, topic_id=tid, error_code=int(error.code), error_message=error.message)
        for name, tid in _requested(request, version)])


@handles(DELETE_TOPICS, 0, 6, error_response=delete_topics_error_response)
async def handle_delete_topics(ctx, request):
    broker = ctx.broker
    version = ctx.api_version
    wanted = _requested(request, version)
    if not broker.controller.is_active:  # ZooKeeper mode: only the controller deletes
        return DeleteTopicsResponse(responses=[
            DeleteTopicsResponse.DeletableTopicResult(
                name=name, topic_id=tid, error_code=int(ErrorCode.NOT_CONTROLLER))
            for name, tid in wanted])
    if not broker.config.delete_topic_enable:
        if version < 3:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Topic deletion is disabled.")
        return DeleteTopicsResponse(responses=[
            DeleteTopicsResponse.DeletableTopicResult(
                name=name, topic_id=tid, error_code=int(ErrorCode.TOPIC_DELETION_DISABLED),
                error_message="Topic deletion is disabled.")
            for name, tid in wanted])
    cache = broker.metadata_cache
    results = []
    to_delete: list[str] = []
    for name, tid in wanted:
        if name is not None and tid != ZERO_UUID:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "Topic name and topic ID can not both be specified.")
        res = DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=tid)
        if tid != ZERO_UUID:
            res.name = cache.topic_name(tid)
            if res.name is None:
                res.error_code = int(ErrorCode.UNKNOWN_TOPIC_ID)
                res.error_message = f"Topic id {tid} not found"
        if res.error_code == 0 and res.name is not None:  # before existence: no disclosure
            code = _delete_authorization(ctx, res.name)
            if code:
                res.error_code = int(code)
        if res.error_code == 0 and (res.name is None or not cache.contains_topic(res.name)):
            res.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            res.error_message = "This server does not host this topic-partition."
        if res.error_code == 0 and res.name not in to_delete:
            to_delete.append(res.name)
        results.append(res)
    throttle_ms = 0
    if to_delete:
        throttled, throttle_ms = throttling.mutation_quota(
            ctx, 5, [(n, cache.num_partitions(n) or 0) for n in to_delete])
        for res in results:
            if res.name in throttled and res.error_code == 0:
                res.error_code = int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
                res.error_message = "The throttling quota has been exceeded."
        to_delete = [n for n in to_delete if n not in throttled]
    if to_delete:
        outcome = {r.name: r for r in await broker.controller.delete_topics(
            names=to_delete, timeout_ms=request.timeout_ms)}
        for res in results:
            r = outcome.get(res.name)
            if res.error_code != 0 or r is None:
                continue
            res.error_code, res.error_message = int(r.error_code), r.error_message
            if res.error_code == 0 and request.timeout_ms <= 0:
                res.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
            if version >= 6 and res.topic_id == ZERO_UUID and r.topic_id is not None:
                res.topic_id = r.topic_id
    return DeleteTopicsResponse(responses=results, throttle_time_ms=throttle_ms)
