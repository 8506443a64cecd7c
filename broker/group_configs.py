"""Per-group dynamic configs: the GROUP config resource (type 32, KIP-848; Kafka 4.x
``GroupConfig`` / ``GroupConfigManager``).

A group's overrides are set with IncrementalAlterConfigs / AlterConfigs on resource type 32
(name = group id) and stored by the controller (``/config/groups/<group>``,
``{"version":1,"config":{..}}``, announced on ``/config/changes`` in ZooKeeper mode; the
embedded store keeps the same document). The keys are Kafka 4.2's group configs:

    key                              type    default (broker config)            bounds
    consumer.session.timeout.ms      int     group.consumer.session.timeout.ms  group.consumer.{min,max}.session.timeout.ms
    consumer.heartbeat.interval.ms   int     group.consumer.heartbeat.interval.ms  group.consumer.{min,max}.heartbeat.interval.ms
    share.session.timeout.ms         int     45000                              45000..60000
    share.heartbeat.interval.ms      int     5000                               5000..15000
    share.record.lock.duration.ms    int     30000                              15000..60000
    share.auto.offset.reset          string  latest       latest | earliest | by_duration:<ISO-8601 duration>
    share.isolation.level            string  read_uncommitted   read_committed | read_uncommitted
    streams.session.timeout.ms       int     45000                              45000..60000
    streams.heartbeat.interval.ms    int     5000                               5000..15000
    streams.num.standby.replicas     int     0                                  0..2
    share.redelivery.backoff.ms      int     0 (off)     Josef: redelivery backoff  0..86400000
    share.redelivery.backoff.max.ms  int     60000       Josef: its cap             0..86400000
    errors.deadletterqueue.topic.name string ""          Josef (KIP-1191's name): dead-letter topic

(the share and streams bounds are Kafka's defaults of ``group.share.*`` / ``group.streams.*``,
used when the broker config has no such key). A session timeout must exceed the heartbeat
interval of the same group type. Errors (Kafka's): an unknown key -> INVALID_CONFIG "Unknown
group config name: X", a value that does not parse or is out of bounds -> INVALID_CONFIG,
an empty group name -> INVALID_REQUEST.

The last three are Josef's share-group keys beyond Kafka (delayed redelivery and dead-letter
topics); ``share.redelivery.backoff.max.ms`` must be >= ``share.redelivery.backoff.ms`` and the
dead-letter topic must be a legal topic name (or empty: off).
``share_partition_config(group)`` resolves a share group's settings (broker
``group.share.*`` defaults + overrides) into a ``coordinator.share.config.SharePartitionConfig``.

The KIP-848 consumer coordinator reads ``consumer_timeouts(group)`` for its session timeout
and heartbeat interval, so a change applies at the group's next heartbeat. The share and
streams keys are stored and described for the coordinators that serve those groups.
DescribeConfigs lists every key: an override with source GROUP_CONFIG (8), else the default
with source DEFAULT_CONFIG (5).
"""

from __future__ import annotations

import re

from common.config_keys import ConfigType
from protocol.errors import ErrorCode, KafkaError

__all__ = ["GROUP_CONFIG_SOURCE", "GroupConfigManager", "validate_group_configs"]

GROUP_CONFIG_SOURCE = 8  # DescribeConfigs ConfigSource GROUP_CONFIG (Kafka 4.0+)
# ISO-8601 duration as Java's Duration.parse reads it, without a sign (no negative durations)
_DURATION = re.compile(r"P(?:\d+D)?(?:T(?=\d)(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?",
                       re.IGNORECASE)

# key -> (type, default broker config key or literal default, (min key, lo), (max key, hi))
_INT_KEYS = {
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", 45000,
                                    ("group.consumer.min.session.timeout.ms", 45000),
                                    ("group.consumer.max.session.timeout.ms", 60000)),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms", 5000,
                                       ("group.consumer.min.heartbeat.interval.ms", 5000),
                                       ("group.consumer.max.heartbeat.interval.ms", 15000)),
    "share.session.timeout.ms": ("group.share.session.timeout.ms", 45000,
                                 ("group.share.min.session.timeout.ms", 45000),
                                 ("group.share.max.session.timeout.ms", 60000)),
    "share.heartbeat.interval.ms": ("group.share.heartbeat.interval.ms", 5000,
                                    ("group.share.min.heartbeat.interval.ms", 5000),
                                    ("group.share.max.heartbeat.interval.ms", 15000)),
    "share.record.lock.duration.ms": ("group.share.record.lock.duration.ms", 30000,
                                      ("group.share.min.record.lock.duration.ms", 15000),
                                      ("group.share.max.record.lock.duration.ms", 60000)),
    "streams.session.timeout.ms": ("group.streams.session.timeout.ms", 45000,
                                   ("group.streams.min.session.timeout.ms", 45000),
                                   ("group.streams.max.session.timeout.ms", 60000)),
    "streams.heartbeat.interval.ms": ("group.streams.heartbeat.interval.ms", 5000,
                                      ("group.streams.min.heartbeat.interval.ms", 5000),
                                      ("group.streams.max.heartbeat.interval.ms", 15000)),
    "streams.num.standby.replicas": ("group.streams.num.standby.replicas", 0,
                                     (None, 0), ("group.streams.max.standby.replicas", 2)),
    "share.redelivery.backoff.ms": (None, 0, (None, 0), (None, 86_400_000)),
    "share.redelivery.backoff.max.ms": (None, 60_000, (None, 0), (None, 86_400_000)),
}
_STRING_KEYS = {
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "errors.deadletterqueue.topic.name": "",
}
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
GROUP_CONFIG_KEYS = sorted([*_INT_KEYS, *_STRING_KEYS])
_PAIRS = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
          ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
          ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


def _broker_value(config, key: str | None, fallback):
    if config is None or key is None:
        return fallback
    try:
        value = config.get(key)
    except KeyError:
        return fallback
    return fallback if value is None else value


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG, message)


def defaults(config) -> dict[str, str]:
    """Every group config key with the value a group without overrides has."""
    out = {k: str(_broker_value(config, spec[0], spec[1])) for k, spec in _INT_KEYS.items()}
    out.update(_STRING_KEYS)
    return out


def validate_group_configs(overrides: dict[str, str], config) -> None:
    """Kafka's ``GroupConfig.validate``: names, value parsing, broker bounds and the session
    timeout / heartbeat interval pairs (over defaults + overrides). KafkaError INVALID_CONFIG."""
    for name in overrides:
        if name not in _INT_KEYS and name not in _STRING_KEYS:
            raise _invalid(f"Unknown group config name: {name}")
    values = {**defaults(config), **overrides}
    ints = {}
    for name, (_, _, (lo_key, lo), (hi_key, hi)) in _INT_KEYS.items():
        raw = values[name]
        try:
            v = ints[name] = int(str(raw).strip())
        except ValueError:
            raise _invalid(f"Invalid value {raw} for configuration {name}: Not a number of "
                           "type INT") from None
        lo_v = int(_broker_value(config, lo_key, lo))
        hi_v = int(_broker_value(config, hi_key, hi))
        if v < lo_v:
            raise _invalid(f"{name} must be greater than or equal to {lo_key or lo_v}")
        if v > hi_v:
            raise _invalid(f"{name} must be less than or equal to {hi_key}")
    for session, heartbeat in _PAIRS:
        if ints[session] <= ints[heartbeat]:
            raise _invalid(f"{session} must be greater than {heartbeat}")
    if not _valid_reset(values["share.auto.offset.reset"]):
        raise _invalid(f"Invalid value {values['share.auto.offset.reset']} for configuration "
                       "share.auto.offset.reset")
    if values["share.isolation.level"].strip().lower() not in ("read_committed",
                                                               "read_uncommitted"):
        raise _invalid(f"Invalid value {values['share.isolation.level']} for configuration "
                       "share.isolation.level: String must be one of: read_committed, "
                       "read_uncommitted")
    if ints["share.redelivery.backoff.max.ms"] < ints["share.redelivery.backoff.ms"]:
        raise _invalid("share.redelivery.backoff.max.ms must be greater than or equal to "
                       "share.redelivery.backoff.ms")
    dlq = values["errors.deadletterqueue.topic.name"].strip()
    if dlq and (not _TOPIC_NAME.fullmatch(dlq) or dlq in (".", "..")):
        raise _invalid(f"Invalid value {dlq} for configuration "
                       "errors.deadletterqueue.topic.name: not a legal topic name")


def _valid_reset(value: str) -> bool:
    """latest, earliest or by_duration:<ISO-8601 duration, not negative, not empty>."""
    v = value.strip()
    if v.lower() in ("latest", "earliest"):
        return True
    prefix = "by_duration:"
    if not v.lower().startswith(prefix):
        return False
    d = v[len(prefix):]
    return len(d) > 1 and _DURATION.fullmatch(d) is not None


class GroupConfigManager:
    """The broker's view of group configs: reads the controller's stored overrides
    (``controller.group_configs()``), validates and stores changes through it."""

    def __init__(self, controller, config=None) -> None:
        self.controller = controller
        self.config = config

    def overrides(self, group_id: str) -> dict[str, str]:
        if self.controller is None:
            return {}
        return dict(self.controller.group_configs().get(group_id, {}))

    def group_ids(self) -> list[str]:
        """Groups with overrides (ListConfigResources, as Kafka's groupConfigManager)."""
        if self.controller is None:
            return []
        return sorted(g for g, c in self.controller.group_configs().items() if c)

    def consumer_timeouts(self, group_id: str, session_ms: int, heartbeat_ms: int
                          ) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a KIP-848 consumer group: its overrides,
        else the given broker-wide values."""
        o = self.overrides(group_id)
        try:
            return (int(o.get("consumer.session.timeout.ms", session_ms)),
                    int(o.get("consumer.heartbeat.interval.ms", heartbeat_ms)))
        except ValueError:
            return session_ms, heartbeat_ms

    def share_partition_config(self, group_id: str):
        """The `SharePartitionConfig` of a share group: broker ``group.share.*`` defaults
        with the group's overrides (an override that no longer validates is ignored)."""
        from coordinator.share.config import SharePartitionConfig, parse_auto_offset_reset
        o = self.overrides(group_id)
        cfg = self.config

        def get(key: str, fallback):
            return _broker_value(cfg, key, fallback)

        def value(key: str, broker_key: str | None, fallback):
            raw = o.get(key)
            return raw if raw is not None else get(broker_key, fallback)

        try:
            return SharePartitionConfig(
                record_lock_duration_ms=int(value("share.record.lock.duration.ms",
                                                  "group.share.record.lock.duration.ms", 30000)),
                delivery_count_limit=int(get("group.share.delivery.count.limit", 5)),
                max_record_locks=int(get("group.share.partition.max.record.locks", 2000)),
                auto_offset_reset=parse_auto_offset_reset(
                    str(value("share.auto.offset.reset", None, "latest"))),
                isolation_level=str(value("share.isolation.level", None,
                                          "read_uncommitted")).strip().lower(),
                redelivery_backoff_ms=int(value("share.redelivery.backoff.ms", None, 0)),
                redelivery_backoff_max_ms=int(value("share.redelivery.backoff.max.ms", None,
                                                    60_000)),
                dead_letter_topic=str(value("errors.deadletterqueue.topic.name", None, ""))
                .strip() or None)
        except ValueError:
            return SharePartitionConfig(
                record_lock_duration_ms=int(get("group.share.record.lock.duration.ms", 30000)),
                delivery_count_limit=int(get("group.share.delivery.count.limit", 5)),
                max_record_locks=int(get("group.share.partition.max.record.locks", 2000)))

    def share_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a share group (overrides, else broker)."""
        o = self.overrides(group_id)
        session = _broker_value(self.config, "group.share.session.timeout.ms", 45000)
        heartbeat = _broker_value(self.config, "group.share.heartbeat.interval.ms", 5000)
        try:
            return (int(o.get("share.session.timeout.ms", session)),
                    int(o.get("share.heartbeat.interval.ms", heartbeat)))
        except ValueError:
            return int(session), int(heartbeat)

    def describe(self, group_id: str) -> list[tuple[str, str, int, ConfigType]]:
        """[(name, value, source, type)] for every key; INVALID_REQUEST for an empty name."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        o = self.overrides(group_id)
        out = []
        for name, value in sorted(defaults(self.config).items()):
            kind = ConfigType.INT if name in _INT_KEYS else ConfigType.STRING
            if name in o:
                out.append((name, o[name], GROUP_CONFIG_SOURCE, kind))
            else:
                out.append((name, value, 5, kind))
        return out

    async def alter(self, group_id: str, r, incremental: bool, validate_only: bool) -> None:
        """AlterConfigs (replace every override) or IncrementalAlterConfigs (SET / DELETE /
        APPEND / SUBTRACT) for one group resource."""
        from controller.broker_config_admin import apply_incremental_ops
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        if self.controller is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group configs are not available")
        if incremental:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            new = apply_incremental_ops(self.overrides(group_id), ops)
        else:
            new = {c.name: c.value for c in r.configs if c.value is not None}
        validate_group_configs(new, self.config)
        if not validate_only:
            await self.controller.set_group_configs(group_id, new)
