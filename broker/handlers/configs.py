"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) and
ListConfigResources (74).

Behaviour (Kafka's ``ConfigHelper`` / ``ZkAdminManager``, ZooKeeper mode; Kafka docs "Topic
Configs" and "Broker Configs"; KIP-226 for sources and synonyms, KIP-339 for incremental
operations):

- Resource types: TOPIC (2), BROKER (4), CLIENT_METRICS (16, KIP-714 subscriptions:
  ``broker.client_metrics``), GROUP (32, per-group configs: ``broker.group_configs``, every
  key described with source GROUP_CONFIG 8 or DEFAULT_CONFIG 5). BROKER_LOGGER (8) and
  anything else answer INVALID_REQUEST with a message (this broker has no dynamic logger
  levels).
- DescribeConfigs TOPIC: an illegal name -> INVALID_TOPIC_EXCEPTION (17), an unknown topic ->
  UNKNOWN_TOPIC_OR_PARTITION (3). Every topic config with its effective value: the topic
  override (source TOPIC_CONFIG 1), else the broker default (STATIC_BROKER_CONFIG 4 when a
  synonym is set in server.properties, else DEFAULT_CONFIG 5). Topic configs are never
  read-only or sensitive.
- DescribeConfigs BROKER: the name must be this broker's id -> every broker config
  (``KafkaConfig.describe``: read-only as Kafka reports it, sensitive values null, source
  DYNAMIC_BROKER_CONFIG 2 / DYNAMIC_DEFAULT_BROKER_CONFIG 3 / STATIC_BROKER_CONFIG 4 /
  DEFAULT_CONFIG 5); the empty name -> the cluster-wide dynamic defaults only (KIP-226); a
  non-integer or another broker's id -> INVALID_REQUEST.
- ``configuration_keys`` null or empty means all (Kafka's ConfigHelper); unknown names are
  left out (no error).
- Synonyms (v1+, when ``include_synonyms``): highest precedence first; for topics the
  override, then per broker synonym (``TOPIC_CONFIG_SYNONYMS``) its static value when set and
  its default when not null.
- ``documentation`` (v3+) is always null; ``config_type`` (v3+) is ConfigType's number.
- AlterConfigs (replace all overrides) / IncrementalAlterConfigs (SET 0 / DELETE 1 / APPEND
  2 / SUBTRACT 3) for TOPIC go to the controller (validation in ``controller.topic_config``:
  INVALID_CONFIG for unknown names / bad values, INVALID_REQUEST for APPEND/SUBTRACT on a
  non-list config). The same resource twice in one request -> INVALID_REQUEST for each copy;
  the same config name twice in one incremental resource -> INVALID_REQUEST.
  ``validate_only`` checks without applying. Changes reach the ReplicaManager through the
  controller's ``on_topic_config_change`` and apply live; they are stored with the topic, so
  they survive restarts.
- Alter for BROKER (KIP-226, ``broker.dynamic_config``): per broker (its id) or cluster-wide
  (empty name); a read-only key -> INVALID_REQUEST "Cannot update these configs
  dynamically: Set(...)" (Kafka's message), an unknown key or bad value -> INVALID_CONFIG, a
  per-broker-only key (listeners, keystore passwords) at the default level or another
  broker's id -> INVALID_REQUEST. The controller stores the entity's overrides
  (``/config/brokers/<id>`` / ``<default>``) and hands them back to every broker, which
  applies them live.
- Alter for CLIENT_METRICS: ``metrics``, ``interval.ms``, ``match`` (INVALID_CONFIG for
  anything else or a bad value); an empty name -> INVALID_REQUEST. Alter for GROUP: Kafka
  4.2's group config keys (``broker.group_configs``: INVALID_CONFIG for unknown keys, bad
  values or values outside the broker's group.* bounds).
- ListConfigResources (Kafka's handleListConfigResources): v0 lists the CLIENT_METRICS
  subscriptions; v1 the resources of the requested ``resource_types`` (empty = all the
  supported ones: GROUP (groups with overrides), CLIENT_METRICS, BROKER_LOGGER and BROKER
  (the live brokers' ids), TOPIC (every topic)), with their type; a type outside those
  answers UNSUPPORTED_VERSION (35) with no resources.

Authorization (with an authorizer): DESCRIBE_CONFIGS (describe) / ALTER_CONFIGS (alter) on
the topic, else TOPIC_AUTHORIZATION_FAILED; on the group for GROUP resources, else
GROUP_AUTHORIZATION_FAILED; on the cluster for BROKER and CLIENT_METRICS resources, else
CLUSTER_AUTHORIZATION_FAILED (per resource). ListConfigResources needs DESCRIBE_CONFIGS on
the cluster, else a top-level CLUSTER_AUTHORIZATION_FAILED with no resources.

Version notes: DescribeConfigs v0-v4 (v4 flexible): v0 ``is_default``; v1 ``config_source``,
synonyms, ``include_synonyms``; v3 ``config_type``, documentation. AlterConfigs v0-v2 (v2
flexible). IncrementalAlterConfigs v0-v1 (v1 flexible). ListConfigResources v0-v1 (flexible;
v0 was ListClientMetricsResources, v1 adds ``resource_types`` and each resource's type,
KIP-1142).
"""

from __future__ import annotations

from collections import Counter

from broker.dynamic_config import broker_id_of
from broker.handlers import authz
from broker.handlers.authz import AclOperation
from broker.handlers.registry import error_code_response, handles
from broker.handlers.topics import TOPIC_CONFIG_SYNONYMS, topic_config_entries
from common.config_keys import BROKER_CONFIG_KEYS, ConfigSource, ConfigType
from controller.admin_validation import validate_topic_name
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
LIST_CONFIG_RESOURCES = 74
ListConfigResourcesResponse = api.API_KEYS[LIST_CONFIG_RESOURCES].response_cls
DescribeConfigsResponse = api.API_KEYS[DESCRIBE_CONFIGS].response_cls
AlterConfigsResponse = api.API_KEYS[ALTER_CONFIGS].response_cls
IncrementalAlterConfigsResponse = api.API_KEYS[INCREMENTAL_ALTER_CONFIGS].response_cls

RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER = 2, 4, 8
RESOURCE_CLIENT_METRICS = 16  # KIP-714
RESOURCE_GROUP = 32  # KIP-848 group configs


def _str(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def topic_config_type(name: str) -> ConfigType:
    """A topic config's type: that of its first broker synonym (Kafka's LogConfig types)."""
    for key in TOPIC_CONFIG_SYNONYMS.get(name, ()):
        spec = BROKER_CONFIG_KEYS.get(key)
        if spec is not None:
            return spec.type
    return ConfigType.STRING


_broker_id_of = broker_id_of


# ----- DescribeConfigs ------------------------------------------------------------------------

def _synonym(name, value, source):
    return DescribeConfigsResponse.DescribeConfigsSynonym(name=name, value=value,
                                                          source=int(source))


def _broker_key_synonyms(config, key: str, levels=("broker", "default", "static")) -> list:
    """Kafka's synonym order: per-broker dynamic, cluster-default dynamic, static, default."""
    spec = BROKER_CONFIG_KEYS.get(key)
    if spec is None:
        return []
    out = []
    per_broker, default = config.dynamic_layers()
    for level, layer, source in (("broker", per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                                 ("default", default,
                                  ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
        if level in levels and key in layer:
            out.append(_synonym(key, None if spec.sensitive else _str(layer[key]), source))
    if "static" in levels and config.is_set(key):
        out.append(_synonym(key, None if spec.sensitive else _str(config.static_value(key)),
                            ConfigSource.STATIC_BROKER_CONFIG))
    if spec.default is not None:
        out.append(_synonym(key, None if spec.sensitive else _str(spec.default),
                            ConfigSource.DEFAULT_CONFIG))
    return out


def _describe_topic(broker, name: str, keys, version: int, synonyms: bool) -> list:
    validate_topic_name(name)
    overrides = broker.controller.topic_configs(name) if broker.controller else None
    if overrides is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"Topic {name} does not exist.")
    out = []
    for cname, value, source in topic_config_entries(broker.config, overrides):
        if keys is not None and cname not in keys:
            continue
        entry = DescribeConfigsResponse.DescribeConfigsResourceResult(
            name=cname, value=value, read_only=False,
            is_default=source == ConfigSource.DEFAULT_CONFIG, config_source=int(source),
            is_sensitive=False, config_type=int(topic_config_type(cname)))
        if synonyms and version >= 1:
            syn = [_synonym(cname, value, ConfigSource.TOPIC_CONFIG)] \
                if source == ConfigSource.TOPIC_CONFIG else []
            for key in TOPIC_CONFIG_SYNONYMS.get(cname, ()):
                syn += _broker_key_synonyms(broker.config, key)
            entry.synonyms = syn
        out.append(entry)
    return out


def _describe_broker(broker, name: str, keys, version: int, synonyms: bool) -> list:
    if _broker_id_of(name, broker.broker_id) is None:
        # the cluster-wide dynamic defaults only (Kafka's ConfigHelper for "<default>")
        _, default = broker.config.dynamic_layers()
        out = []
        for cname in sorted(default):
            if keys is not None and cname not in keys:
                continue
            spec = BROKER_CONFIG_KEYS[cname]
            entry = DescribeConfigsResponse.DescribeConfigsResourceResult(
                name=cname, value=None if spec.sensitive else _str(default[cname]),
                read_only=False, is_default=False,
                config_source=int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                is_sensitive=spec.sensitive, config_type=int(spec.type))
            if synonyms and version >= 1:
                entry.synonyms = _broker_key_synonyms(broker.config, cname,
                                                      ("default", "static"))
            out.append(entry)
        return out
    out = []
    for e in broker.config.describe(keys):
        entry = DescribeConfigsResponse.DescribeConfigsResourceResult(
            name=e.name, value=e.value, read_only=e.read_only, is_default=e.is_default,
            config_source=int(e.source), is_sensitive=e.is_sensitive,
            config_type=int(e.type))
        if synonyms and version >= 1:
            entry.synonyms = _broker_key_synonyms(broker.config, e.name)
        out.append(entry)
    return out


def describe_configs_error_response(request, version: int, error: KafkaError):
    return DescribeConfigsResponse(results=[
        DescribeConfigsResponse.DescribeConfigsResult(
            error_code=int(error.code), error_message=error.message,
            resource_type=r.resource_type, resource_name=r.resource_name, configs=[])
        for r in request.resources])


@handles(DESCRIBE_CONFIGS, 0, 4, error_response=describe_configs_error_response)
def handle_describe_configs(ctx, request):
    broker = ctx.broker
    version = ctx.api_version
    synonyms = version >= 1 and bool(request.include_synonyms)
    results = []
    for r in request.resources:
        res = DescribeConfigsResponse.DescribeConfigsResult(
            resource_type=r.resource_type, resource_name=r.resource_name, configs=[])
        keys = set(r.configuration_keys) if r.configuration_keys else None
        try:
            _authorize(ctx, r.resource_type, r.resource_name, AclOperation.DESCRIBE_CONFIGS)
            if r.resource_type == RESOURCE_TOPIC:
                res.configs = _describe_topic(broker, r.resource_name, keys, version, synonyms)
            elif r.resource_type == RESOURCE_BROKER:
                res.configs = _describe_broker(broker, r.resource_name, keys, version,
                                               synonyms)
            elif r.resource_type == RESOURCE_CLIENT_METRICS and broker.client_metrics:
                res.configs = [DescribeConfigsResponse.DescribeConfigsResourceResult(
                    name=n, value=v, read_only=False, is_default=False,
                    config_source=int(ConfigSource.CLIENT_METRICS_CONFIG),
                    is_sensitive=False, config_type=int(t))
                    for n, v, t in broker.client_metrics.describe(r.resource_name)
                    if keys is None or n in keys]
            elif r.resource_type == RESOURCE_GROUP and _group_configs(broker) is not None:
                res.configs = [DescribeConfigsResponse.DescribeConfigsResourceResult(
                    name=n, value=v, read_only=False, is_default=src == ConfigSource.DEFAULT_CONFIG,
                    config_source=int(src), is_sensitive=False, config_type=int(t),
                    synonyms=[_synonym(n, v, src)] if synonyms else [])
                    for n, v, src, t in _group_configs(broker).describe(r.resource_name)
                    if keys is None or n in keys]
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Unsupported resource type {r.resource_type}")
        except KafkaError as e:
            res.error_code, res.error_message = int(e.code), e.message
            res.configs = []
        results.append(res)
    return DescribeConfigsResponse(results=results)


# ----- AlterConfigs / IncrementalAlterConfigs ---------------------------------------------------

async def _alter_broker(broker, name: str, r, incremental: bool, validate_only: bool) -> None:
    """KIP-226: validate with the broker's DynamicBrokerConfig, then the controller stores
    the entity's new overrides (and delivers them back, applied live)."""
    from controller.broker_config_admin import apply_incremental_ops

    dynamic = broker.dynamic_config
    if dynamic is None or broker.controller is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Dynamic broker configs are not available")
    entity = dynamic.entity_of(name)
    controller = broker.controller
    if incremental:
        names = Counter(c.name for c in r.configs)
        dup = sorted(n for n, k in names.items() if k > 1)
        if dup:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Error due to duplicate config keys: {', '.join(dup)}")
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        touched = {c.name: c.value for c in r.configs if c.config_operation != 1}
        dynamic.validate(entity, touched)
        new = apply_incremental_ops(controller.broker_configs(entity), ops)
        dynamic.validate(entity, new)
        result = await controller.incremental_alter_broker_configs(entity, ops, validate_only)
    else:
        new = {c.name: c.value for c in r.configs if c.value is not None}
        dynamic.validate(entity, new)
        result = await controller.alter_broker_configs(entity, new, validate_only)
    if result.error_code:
        raise KafkaError(ErrorCode(result.error_code), result.error_message)


def _authorize(ctx, resource_type: int, name: str, operation: AclOperation) -> None:
    """Kafka's checks: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic
    (TOPIC_AUTHORIZATION_FAILED), on the cluster for broker resources
    (CLUSTER_AUTHORIZATION_FAILED)."""
    if resource_type == RESOURCE_TOPIC:
        if not authz.authorize(ctx, operation, authz.ResourceType.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    elif resource_type == RESOURCE_GROUP:
        if not authz.authorize(ctx, operation, authz.ResourceType.GROUP, name):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    elif resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS):
        if not authz.authorize_cluster(ctx, operation):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)


def _group_configs(broker):
    return getattr(broker, "group_configs", None)


def _duplicates(request) -> set[tuple[int, str]]:
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    return {k for k, n in counts.items() if n > 1}


async def _alter_all(ctx, request, response_cls, topic_call, incremental: bool):
    broker = ctx.broker
    dups = _duplicates(request)
    out = []
    for r in request.resources:
        res = response_cls.AlterConfigsResourceResponse(
            resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            if (r.resource_type, r.resource_name) in dups:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Duplicate resource {r.resource_name!r} in the request")
            _authorize(ctx, r.resource_type, r.resource_name, AclOperation.ALTER_CONFIGS)
            if r.resource_type == RESOURCE_TOPIC:
                validate_topic_name(r.resource_name)
                result = await topic_call(r)
                if result.error_code:
                    raise KafkaError(ErrorCode(result.error_code), result.error_message)
            elif r.resource_type == RESOURCE_BROKER:
                await _alter_broker(broker, r.resource_name, r, incremental,
                                    bool(request.validate_only))
            elif r.resource_type == RESOURCE_CLIENT_METRICS and broker.client_metrics:
                await broker.client_metrics.alter(r.resource_name, r, incremental,
                                                  bool(request.validate_only))
            elif r.resource_type == RESOURCE_GROUP and _group_configs(broker) is not None:
                await _group_configs(broker).alter(r.resource_name, r, incremental,
                                                   bool(request.validate_only))
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Unsupported resource type {r.resource_type}")
        except KafkaError as e:
            res.error_code, res.error_message = int(e.code), e.message
        out.append(res)
    return response_cls(responses=out)


def _alter_error_response(response_cls):
    def build(request, version: int, error: KafkaError):
        return response_cls(responses=[
            response_cls.AlterConfigsResourceResponse(
                error_code=int(error.code), error_message=error.message,
                resource_type=r.resource_type, resource_name=r.resource_name)
            for r in request.resources])
    return build


@handles(ALTER_CONFIGS, 0, 2, error_response=_alter_error_response(AlterConfigsResponse))
async def handle_alter_configs(ctx, request):
    controller = ctx.broker.controller
    validate_only = bool(request.validate_only)

    async def topic_call(r):
        return await controller.alter_topic_configs(
            r.resource_name, {c.name: c.value for c in r.configs}, validate_only=validate_only)

    return await _alter_all(ctx, request, AlterConfigsResponse, topic_call, False)


@handles(INCREMENTAL_ALTER_CONFIGS, 0, 1,
         error_response=_alter_error_response(IncrementalAlterConfigsResponse))
async def handle_incremental_alter_configs(ctx, request):
    controller = ctx.broker.controller
    validate_only = bool(request.validate_only)

    async def topic_call(r):
        names = Counter(c.name for c in r.configs)
        dup = sorted(n for n, k in names.items() if k > 1)
        if dup:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Error due to duplicate config keys: {', '.join(dup)}")
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        return await controller.incremental_alter_topic_configs(
            r.resource_name, ops, validate_only=validate_only)

    return await _alter_all(ctx, request, IncrementalAlterConfigsResponse, topic_call, True)


# ----- ListConfigResources ----------------------------------------------------------------------

# the types v1 lists (Kafka's ListConfigResourcesRequest.supportedResourceTypes); v0 only 16
LISTABLE_TYPES = (RESOURCE_GROUP, RESOURCE_CLIENT_METRICS, RESOURCE_BROKER_LOGGER,
                  RESOURCE_BROKER, RESOURCE_TOPIC)


@handles(LIST_CONFIG_RESOURCES, 0, 1,
         error_response=error_code_response(ListConfigResourcesResponse))
def handle_list_config_resources(ctx, request):
    authz.require_cluster(ctx, AclOperation.DESCRIBE_CONFIGS)
    broker = ctx.broker
    R = ListConfigResourcesResponse
    supported = LISTABLE_TYPES if ctx.api_version >= 1 else (RESOURCE_CLIENT_METRICS,)
    wanted = list(request.resource_types) if ctx.api_version >= 1 else []
    if any(t not in supported for t in wanted):
        return R(error_code=int(ErrorCode.UNSUPPORTED_VERSION), config_resources=[])
    wanted = set(wanted or supported)
    out: list[tuple[str, int]] = []
    if RESOURCE_GROUP in wanted and _group_configs(broker) is not None:
        out += [(g, RESOURCE_GROUP) for g in _group_configs(broker).group_ids()]
    if RESOURCE_CLIENT_METRICS in wanted and getattr(broker, "client_metrics", None):
        out += [(n, RESOURCE_CLIENT_METRICS) for n in sorted(broker.client_metrics.subscriptions())]
    if wanted & {RESOURCE_BROKER_LOGGER, RESOURCE_BROKER}:
        ids = sorted(b.id for b in broker.metadata_cache.alive_brokers())
        for t in (RESOURCE_BROKER_LOGGER, RESOURCE_BROKER):
            if t in wanted:
                out += [(str(i), t) for i in ids]
    if RESOURCE_TOPIC in wanted:
        out += [(t, RESOURCE_TOPIC) for t in sorted(broker.metadata_cache.all_topics())]
    return R(error_code=0, config_resources=[R.ConfigResource(resource_name=n, resource_type=t)
                                             for n, t in out])
