"""DynamicBrokerConfig: KIP-226 broker configs changed at runtime (Kafka's DynamicBrokerConfig).

Two layers over ``server.properties``: per-broker overrides (entity ``"<id>"``, ZooKeeper's
``/config/brokers/<id>``) win over cluster-wide defaults (entity ``"<default>"``,
``/config/brokers/<default>``), which win over the static file and Kafka's defaults.
DescribeConfigs shows each value's source (DYNAMIC_BROKER_CONFIG 2,
DYNAMIC_DEFAULT_BROKER_CONFIG 3, STATIC_BROKER_CONFIG 4, DEFAULT_CONFIG 5) and synonyms.

Who calls: the controller delivers every entity's full set of overrides through
``BrokerMetadataListener.on_broker_config_change`` at startup and on each change;
``on_change`` re-layers ``KafkaConfig`` and applies what changed, live:

- log defaults (``log.retention.ms``, ``log.segment.bytes``, ``message.max.bytes``,
  ``log.cleanup.policy``, ... every broker synonym of a topic config): the LogManager's
  default LogConfig is rebuilt and every hosted topic's LogConfig re-derived from its own
  overrides over the new defaults;
- ``min.insync.replicas``: the default of topics without their own;
- ``num.io.threads``: the RequestChannel grows or shrinks its worker pool;
- ``log.cleaner.threads``: the LogCleaner grows or shrinks its workers;
- anything read at use time (``config.get``) simply sees the new value;
- every other key of Kafka's DynamicBrokerConfig (``config_keys.KAFKA_DYNAMIC_BROKER_CONFIGS``)
  is stored and reported; a change of one Josef does not act on
  (``config_keys.DYNAMIC_NOT_APPLIED``) or reads only at startup (``DYNAMIC_AT_RESTART``) is
  logged as a warning naming it.

``validate(entity, configs)`` is what AlterConfigs / IncrementalAlterConfigs on BROKER run
before asking the controller to store the change: read-only keys -> INVALID_REQUEST ("Cannot
update these configs dynamically: ..."), per-broker-only keys at the default level ->
INVALID_REQUEST, an unknown key or a bad value -> INVALID_CONFIG.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.config_values import parse_value
from common.config_error import ConfigError
from common.config_keys import (
    BROKER_CONFIG_KEYS,
    DYNAMIC_AT_RESTART,
    DYNAMIC_NOT_APPLIED,
    listener_key,
)
from protocol.errors import ErrorCode, KafkaError

__all__ = ["DEFAULT_ENTITY", "DynamicBrokerConfig", "PER_BROKER_ONLY"]

log = logging.getLogger(__name__)

DEFAULT_ENTITY = "<default>"
#: keys Kafka accepts only per broker (listener reconfiguration, KIP-226's
#: DynamicListenerConfig and the keystore of a listener)
PER_BROKER_ONLY = frozenset({"listeners", "advertised.listeners",
                             "listener.security.protocol.map", "ssl.keystore.password",
                             "ssl.key.password", "ssl.truststore.password"})


def broker_id_of(name: str, broker_id: int) -> int | None:
    """A BROKER resource name: None for the cluster-wide default (empty name), this
    broker's id for its own; INVALID_REQUEST otherwise."""
    if name == "":
        return None
    try:
        wanted = int(name)
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Broker id must be an integer, but it is: {name}") from None
    if wanted != broker_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {broker_id} or empty string, "
                         f"but received {name}")
    return wanted


class DynamicBrokerConfig:
    """See the module docstring. ``services``: the broker's BrokerServices (config,
    broker_id, log_manager, replica_manager, controller, socket_server, log_cleaner may be
    absent or None)."""

    def __init__(self, services, server=None) -> None:
        self.services = services
        self.server = server  # BrokerServer: its socket_server (num.io.threads)
        self.config = services.config
        self.broker_id = services.broker_id
        self.entities: dict[str, dict[str, str]] = {}  # entity -> stored overrides
        self.listeners: list[Callable[[set[str]], None]] = []  # extra reconfigurables
        #: extra checks of a new set of overrides: ``fn(entity, configs)`` raising KafkaError
        #: (issue 15: a listener's new keystore must load and keep its DN/SANs)
        self.validators: list[Callable[[str, dict[str, str | None]], None]] = []

    # --- validation (AlterConfigs on BROKER) --------------------------------------------
    def entity_of(self, resource_name: str) -> str:
        """The entity a BROKER resource name denotes: "" -> "<default>", this broker's id
        -> itself; anything else -> INVALID_REQUEST (Kafka's ConfigAdminManager)."""
        wanted = broker_id_of(resource_name, self.broker_id)
        return DEFAULT_ENTITY if wanted is None else str(wanted)

    def validate(self, entity: str, configs: dict[str, str | None]) -> None:
        """Raise KafkaError if ``configs`` (the new full set of overrides) cannot be set."""
        listener_keys = {n: listener_key(n) for n in configs if listener_key(n) is not None}
        read_only = sorted(n for n in configs
                           if n in BROKER_CONFIG_KEYS and BROKER_CONFIG_KEYS[n].read_only
                           or n in listener_keys and listener_keys[n][2].read_only)
        if read_only:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Cannot update these configs dynamically: Set({', '.join(read_only)})")
        unknown = sorted(n for n in configs if n not in BROKER_CONFIG_KEYS
                         and n not in listener_keys)
        if unknown:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Unknown broker configs: {', '.join(unknown)}")
        if entity == DEFAULT_ENTITY:
            per_broker = sorted(n for n in configs if n in PER_BROKER_ONLY
                                or n in listener_keys)
            if per_broker:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Cannot update these configs at default cluster level, "
                                 f"broker id must be specified: Set({', '.join(per_broker)})")
        for name, raw in configs.items():
            if raw is None:
                continue
            try:
                parse_value(listener_keys[name][2] if name in listener_keys
                             else BROKER_CONFIG_KEYS[name], raw)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
            if name == "num.io.threads" and int(raw) < 1:
                raise KafkaError(ErrorCode.INVALID_CONFIG, "num.io.threads must be >= 1")
        for check in self.validators:
            check(entity, configs)

    # --- applying (BrokerMetadataListener.on_broker_config_change) ------------------------
    def on_change(self, entity: str, configs: dict[str, str]) -> set[str]:
        """The controller says ``entity``'s overrides are now ``configs``. Returns the keys
        whose effective value changed (after applying them)."""
        if entity not in (DEFAULT_ENTITY, str(self.broker_id)):
            return set()
        self.entities[entity] = dict(configs)
        changed = self.config.apply_dynamic(self.entities.get(str(self.broker_id), {}),
                                            self.entities.get(DEFAULT_ENTITY, {}))
        if changed:
            log.info("Dynamic broker configs of %s changed: %s", entity,
                     ", ".join(sorted(changed)))
            _warn_unapplied(changed)
            self.reconfigure(changed)
        return changed

    def reconfigure(self, changed: set[str]) -> None:
        s = self.services
        cfg = self.config
        rm = getattr(s, "replica_manager", None)
        lm = getattr(s, "log_manager", None)
        if lm is not None and rm is not None and changed & _LOG_KEYS:
            from storage.config import LogConfig
            try:
                lm.default_config = LogConfig.from_props(cfg.topic_config_defaults())
            except KafkaError as e:
                log.error("cannot apply dynamic log configs: %s", e)
            else:
                controller = getattr(s, "controller", None)
                for topic in sorted({t for t, _ in rm.partitions}):
                    overrides = (controller.topic_configs(topic) if controller else None) or {}
                    rm.on_topic_config_change(topic, overrides)
        if rm is not None and "min.insync.replicas" in changed:
            rm.default_min_isr = cfg.get("min.insync.replicas")
        server = getattr(self.server, "socket_server", None)
        if server is not None and "num.io.threads" in changed:
            server.request_channel.resize(cfg.get("num.io.threads"))
        cleaner = getattr(lm, "cleaner", None)
        if cleaner is not None and "log.cleaner.threads" in changed:
            cleaner.resize(cfg.get("log.cleaner.threads"))
        for fn in self.listeners:
            try:
                fn(changed)
            except Exception:  # noqa: BLE001 - one reconfigurable's failure is logged
                log.exception("reconfiguring after %s failed", sorted(changed))


def _warn_unapplied(changed: set[str]) -> None:
    """Name the changed keys Josef stores and reports but does not act on (or only at the
    next start), listener-prefixed ones by their full name."""
    def base(name: str) -> str:
        lk = listener_key(name)
        return lk[2].name if lk is not None else name

    ignored = sorted(n for n in changed if base(n) in DYNAMIC_NOT_APPLIED)
    later = sorted(n for n in changed if base(n) in DYNAMIC_AT_RESTART)
    if ignored:
        log.warning("Dynamic broker config(s) %s stored and reported, but Josef does not act "
                    "on them", ", ".join(ignored))
    if later:
        log.warning("Dynamic broker config(s) %s stored; Josef applies them at the next "
                    "restart", ", ".join(later))


def _log_keys() -> frozenset[str]:
    from broker.handlers.topics import TOPIC_CONFIG_SYNONYMS
    keys = {k for syn in TOPIC_CONFIG_SYNONYMS.values() for k in syn}
    return frozenset(keys | {"log.retention.hours", "log.retention.minutes",
                             "log.roll.hours", "log.roll.jitter.hours"})


_LOG_KEYS = _log_keys()
