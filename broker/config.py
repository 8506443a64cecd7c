"""Typed broker configuration (``KafkaConfig``) read from a ``server.properties`` file.

Usage::

    config = KafkaConfig.from_file("config/server.properties", overrides=["broker.id=2"])
    config.broker_id, config.listeners, config.log_dirs, config.log_retention_ms
    config.get("group.max.size")          # any known key, parsed to its type
    config.describe()                     # entries for DescribeConfigs

Rules (Kafka's ``KafkaConfig``/``ConfigDef`` behaviour):

- Keys, types, defaults and valid values: :mod:`common.config_keys`; how one value parses
  (types, ranges, listeners, ``listener.name.*`` keys): :mod:`broker.config_values`.
- A value that does not parse or is out of range raises :class:`ConfigError` naming the
  key, the value and what is allowed.
- ``--override key=value`` entries are applied after the file, as ``kafka-server-start.sh``
  does, and count as explicitly set (source STATIC_BROKER_CONFIG).
- Unknown keys are logged once each as a warning and otherwise ignored.
- Precedence: ``log.dirs`` over ``log.dir``; ``log.retention.ms`` over ``.minutes`` over
  ``.hours`` (a negative result means unlimited: -1); ``log.roll.ms`` over ``log.roll.hours``;
  ``log.flush.interval.ms`` falls back to ``log.flush.scheduler.interval.ms``;
  ``zookeeper.connection.timeout.ms`` falls back to ``zookeeper.session.timeout.ms``;
  ``advertised.listeners`` falls back to ``listeners``.
- ``zookeeper.connect`` absent (or empty) means embedded single-node mode.
- Every security protocol is served (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; issue 15,
  ``broker.security``). ``listener.name.<listener>.<key>`` overrides an ``ssl.*``/``sasl.*``
  key (and ``max.connections``, ``max.connection.creation.rate``,
  ``connections.max.reauth.ms``) for one listener, ``listener.name.<listener>.<mechanism>.
  sasl.jaas.config`` for one SASL mechanism of it (Kafka's ``ListenerName.configPrefix``);
  :meth:`KafkaConfig.listener_get` resolves them.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.config_values import (
    parse_listeners,
    parse_override,
    parse_protocol_map,
    parse_value,
    to_string,
)
from common.config_error import ConfigError, ConfigFileError
from common.config_keys import (
    BROKER_CONFIG_KEYS,
    LISTENER_PREFIX,
    ConfigSource,
    ConfigType,
    listener_key,
)
from common.properties import PropertiesError, load_properties
from controller.zk_data import Endpoint

__all__ = [
    "ConfigEntry",
    "Endpoint",
    "KafkaConfig",
]

log = logging.getLogger("broker.config")


@dataclass(frozen=True)
class ConfigEntry:
    """One row of :meth:`KafkaConfig.describe` (DescribeConfigs ``DescribeConfigsResourceResult``).

    ``value`` is the string form Kafka reports (``None`` for null and for sensitive keys).
    """

    name: str
    value: str | None
    type: ConfigType
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    is_default: bool


class KafkaConfig:
    """Parsed, validated broker configuration. Immutable after construction, except for the
    KIP-226 dynamic layers (``apply_dynamic``) that ``broker.dynamic_config`` manages.

    ``KafkaConfig(props, overrides=())``: ``props`` maps Kafka key names to strings (or to
    already typed values); ``overrides`` are ``"key=value"`` strings applied on top.
    Raises :class:`ConfigError` on the first invalid value.
    """

    def __init__(self, props: Mapping[str, Any] | None = None, overrides: Iterable[str] = ()):
        merged: dict[str, Any] = dict(props or {})
        for text in overrides:
            k, v = parse_override(text)
            merged[k] = v
        self._explicit: dict[str, Any] = {}
        self.unknown_keys: list[str] = []
        #: listener name (upper case) -> {key or "<mechanism>.<key>": parsed value}
        self.listener_overrides: dict[str, dict[str, Any]] = {}
        #: the same from KIP-226 dynamic configs (per broker), winning over the static ones
        self._dynamic_listener: dict[str, dict[str, Any]] = {}
        for name, raw in merged.items():
            key = BROKER_CONFIG_KEYS.get(name)
            if key is None:
                if not self._listener_override(name, raw):
                    self.unknown_keys.append(name)
                continue
            self._explicit[name] = parse_value(key, raw)
        for name in self.unknown_keys:
            log.warning("The configuration '%s' was supplied but isn't a known config.", name)
        self._values = {n: self._explicit.get(n, k.default) for n, k in BROKER_CONFIG_KEYS.items()}
        self._validate()
        # KIP-226 dynamic layers (broker.dynamic_config sets them): name -> parsed value
        self._dynamic_broker: dict[str, Any] = {}
        self._dynamic_default: dict[str, Any] = {}

    def _listener_override(self, name: str, raw: Any) -> bool:
        """Record ``listener.name.<l>.<key>`` / ``listener.name.<l>.<mech>.<key>``; False if
        ``name`` is not of that shape (an unknown key)."""
        parsed = listener_key(name)
        if parsed is None:
            return False
        listener, stored, key = parsed
        try:
            value = parse_value(key, raw)
        except ConfigError as e:
            raise ConfigError(name, raw, e.allowed) from None
        self.listener_overrides.setdefault(listener, {})[stored] = value
        return True

    def listener_get(self, listener: str, name: str, mechanism: str | None = None) -> Any:
        """The value of ``name`` for one listener: ``listener.name.<l>.<mechanism>.<name>``
        (when ``mechanism`` is given), then ``listener.name.<l>.<name>``, then ``name``."""
        listener = listener.upper()
        for overrides in (self._dynamic_listener.get(listener, {}),
                          self.listener_overrides.get(listener, {})):
            if mechanism is not None:
                mkey = f"{mechanism.lower()}.{name}"
                if mkey in overrides:
                    return overrides[mkey]
            if name in overrides:
                return overrides[name]
        return self._values[name]

    def listener_is_set(self, listener: str, name: str, mechanism: str | None = None) -> bool:
        overrides = self.listener_overrides.get(listener.upper(), {})
        return (mechanism is not None and f"{mechanism.lower()}.{name}" in overrides) \
            or name in overrides or name in self._explicit

    @property
    def inter_broker_listener_name(self) -> str:
        """``inter.broker.listener.name``, else the listener named like
        ``security.inter.broker.protocol`` (Kafka's ``interBrokerListenerName``)."""
        ibl = self._values["inter.broker.listener.name"]
        return (ibl or self._values["security.inter.broker.protocol"]).upper()

    @property
    def inter_broker_security_protocol(self) -> str:
        name = self.inter_broker_listener_name
        return self.listener_security_protocol_map.get(name, name)

    # ----- construction -------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> KafkaConfig:
        """Read ``path`` (Java properties syntax) and apply ``overrides``.

        Raises :class:`ConfigError` for a missing/unreadable/malformed file or a bad value.
        """
        try:
            props = load_properties(path)
        except OSError as e:
            raise ConfigFileError(os.fspath(path), e.strerror or str(e)) from None
        except PropertiesError as e:
            raise ConfigFileError(os.fspath(path), str(e)) from None
        return cls(props, overrides)

    def _validate(self) -> None:
        bid, max_id = self._values["broker.id"], self._values["reserved.broker.max.id"]
        lowest = -1 if self._values["broker.id.generation.enable"] else 0
        if not lowest <= bid <= max_id:
            raise ConfigError("broker.id", bid, f"an integer in [{lowest},...,{max_id}] "
                              "(reserved.broker.max.id; -1 only with broker.id.generation.enable)")
        self.listener_security_protocol_map = parse_protocol_map(
            self._values["listener.security.protocol.map"])
        self.listeners: list[Endpoint] = parse_listeners(
            "listeners", self._values["listeners"], self.listener_security_protocol_map)
        if not self.listeners:
            raise ConfigError("listeners", self._values["listeners"], "at least one listener")
        adv = self._values["advertised.listeners"]
        if adv is None:
            self.advertised_listeners = list(self.listeners)
        else:
            self.advertised_listeners = parse_listeners(
                "advertised.listeners", adv, self.listener_security_protocol_map)
            names = {e.listener_name for e in self.listeners}
            for e in self.advertised_listeners:
                if e.listener_name not in names:
                    raise ConfigError("advertised.listeners", adv,
                                      "listener names from listeners: " + ", ".join(sorted(names)),
                                      f"{e.listener_name} is not a listener")
                if e.host == "0.0.0.0":
                    raise ConfigError("advertised.listeners", adv, "a routable host",
                                      "cannot advertise the meta-address 0.0.0.0")
        dirs_key = "log.dirs" if self._values["log.dirs"] is not None else "log.dir"
        self.log_dirs: list[str] = [
            d.strip() for d in self._values[dirs_key].split(",") if d.strip()
        ]
        if not self.log_dirs:
            raise ConfigError(dirs_key, self._values[dirs_key], "one or more directories")
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ConfigError(dirs_key, self._values[dirs_key], "distinct directories",
                              "a directory is listed twice")
        ibl = self._values["inter.broker.listener.name"]
        if ibl is not None and ibl.upper() not in {e.listener_name for e in self.listeners}:
            raise ConfigError("inter.broker.listener.name", ibl,
                              "one of " + ", ".join(e.listener_name for e in self.listeners))
        qbytes = self._values["queued.max.request.bytes"]
        if 0 < qbytes < self._values["socket.request.max.bytes"]:
            raise ConfigError("queued.max.request.bytes", qbytes,
                              "-1 (no bound) or at least socket.request.max.bytes ("
                              f"{self._values['socket.request.max.bytes']})")
        if ibl is not None and "security.inter.broker.protocol" in self._explicit:
            raise ConfigError("security.inter.broker.protocol",
                              self._values["security.inter.broker.protocol"],
                              "only one of security.inter.broker.protocol and "
                              "inter.broker.listener.name")
        names = {e.listener_name for e in self.listeners}
        for listener in self.listener_overrides:
            if listener not in names:
                log.warning("listener.name.%s.* configs are set but %s is not a listener",
                            listener.lower(), listener)
        gmin = self._values["group.min.session.timeout.ms"]
        gmax = self._values["group.max.session.timeout.ms"]
        if gmin > gmax:
            raise ConfigError("group.min.session.timeout.ms", gmin,
                              f"at most group.max.session.timeout.ms ({gmax})")

    def advertised_endpoints(self, bound_ports: Mapping[str, int] | None = None) -> list[Endpoint]:
        """Endpoints to register/advertise: port 0 replaced by the bound port of that listener
        (``bound_ports`` by listener name), an empty or 0.0.0.0 host by this machine's FQDN."""
        out = []
        for e in self.advertised_listeners:
            host = e.host if e.host not in ("", "0.0.0.0", "::") else socket.getfqdn()
            port = e.port
            if port == 0 and bound_ports and e.listener_name in bound_ports:
                port = bound_ports[e.listener_name]
            out.append(Endpoint(e.listener_name, host, port, e.security_protocol))
        return out

    # ----- generic access -----------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The parsed value of a known key (``None`` for null); ``KeyError`` if unknown."""
        return self._values[name]

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given explicitly (file or override)."""
        return name in self._explicit

    def source(self, name: str) -> ConfigSource:
        if name not in BROKER_CONFIG_KEYS:
            raise KeyError(name)
        if name in self._dynamic_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self._dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return ConfigSource.STATIC_BROKER_CONFIG if name in self._explicit \
            else ConfigSource.DEFAULT_CONFIG

    def static_value(self, name: str) -> Any:
        """The value from server.properties (or the default), ignoring dynamic layers."""
        return self._explicit.get(name, BROKER_CONFIG_KEYS[name].default)

    def dynamic_layers(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(per-broker, cluster-default) dynamic values in force (KIP-226)."""
        return dict(self._dynamic_broker), dict(self._dynamic_default)

    def apply_dynamic(self, per_broker: Mapping[str, str], default: Mapping[str, str]
                      ) -> set[str]:
        """Set the KIP-226 dynamic layers (string values as stored): a per-broker value wins
        over a cluster default, which wins over server.properties and the default. Unknown
        or read-only keys and unparsable values are skipped with a warning (a bad stored
        value must not stop the broker). Returns the names whose effective value changed."""
        layers: list[dict[str, Any]] = []
        dynamic_listener: dict[str, dict[str, Any]] = {}
        for name, raw in per_broker.items():  # listener.name.* keys are per broker only
            lk = listener_key(name)
            if lk is None:
                continue
            try:
                dynamic_listener.setdefault(lk[0], {})[lk[1]] = parse_value(lk[2], raw)
            except ConfigError as e:
                log.warning("ignoring dynamic broker config %s: %s", name, e)
        changed_listener = {f"{LISTENER_PREFIX}{lst.lower()}.{k}"
                            for lst in set(dynamic_listener) | set(self._dynamic_listener)
                            for k in set(dynamic_listener.get(lst, {}))
                            | set(self._dynamic_listener.get(lst, {}))
                            if dynamic_listener.get(lst, {}).get(k)
                            != self._dynamic_listener.get(lst, {}).get(k)}
        self._dynamic_listener = dynamic_listener
        for source in (per_broker, default):
            parsed: dict[str, Any] = {}
            for name, raw in source.items():
                if listener_key(name) is not None:
                    continue
                key = BROKER_CONFIG_KEYS.get(name)
                if key is None or key.read_only:
                    log.warning("ignoring dynamic broker config %s: not a dynamic config", name)
                    continue
                try:
                    parsed[name] = parse_value(key, raw)
                except ConfigError as e:
                    log.warning("ignoring dynamic broker config %s: %s", name, e)
            layers.append(parsed)
        self._dynamic_broker, self._dynamic_default = layers
        changed = set()
        for name in set(self._values):
            if name in self._dynamic_broker:
                value = self._dynamic_broker[name]
            elif name in self._dynamic_default:
                value = self._dynamic_default[name]
            else:
                value = self.static_value(name)
            if self._values[name] != value:
                self._values[name] = value
                changed.add(name)
        return changed | changed_listener

    def originals(self) -> dict[str, Any]:
        """The explicitly set known keys with their parsed values."""
        return dict(self._explicit)

    def describe(self, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """Entries for DescribeConfigs (all known keys, or ``names``; unknown names skipped)."""
        wanted = BROKER_CONFIG_KEYS if names is None else [n for n in names
                                                            if n in BROKER_CONFIG_KEYS]
        out = []
        for name in wanted:
            key = BROKER_CONFIG_KEYS[name]
            value = None if key.sensitive else to_string(key, self._values[name])
            source = self.source(name)
            out.append(ConfigEntry(name, value, key.type, source, key.read_only,
                                   key.sensitive, source is ConfigSource.DEFAULT_CONFIG))
        return out

    def __repr__(self) -> str:
        shown = {k: ("[hidden]" if BROKER_CONFIG_KEYS[k].sensitive else v)
                 for k, v in self._explicit.items()}
        return f"KafkaConfig({shown!r})"

    # ----- typed accessors for what the broker uses -----------------------------------------
    broker_id = property(lambda self: self._values["broker.id"])
    broker_rack = property(lambda self: self._values["broker.rack"])
    num_partitions = property(lambda self: self._values["num.partitions"])
    default_replication_factor = property(lambda self: self._values["default.replication.factor"])
    auto_create_topics_enable = property(lambda self: self._values["auto.create.topics.enable"])
    delete_topic_enable = property(lambda self: self._values["delete.topic.enable"])
    num_network_threads = property(lambda self: self._values["num.network.threads"])
    num_io_threads = property(lambda self: self._values["num.io.threads"])
    queued_max_requests = property(lambda self: self._values["queued.max.requests"])
    socket_request_max_bytes = property(lambda self: self._values["socket.request.max.bytes"])
    socket_send_buffer_bytes = property(lambda self: self._values["socket.send.buffer.bytes"])
    socket_receive_buffer_bytes = property(
        lambda self: self._values["socket.receive.buffer.bytes"])
    connections_max_idle_ms = property(lambda self: self._values["connections.max.idle.ms"])
    message_max_bytes = property(lambda self: self._values["message.max.bytes"])
    log_segment_bytes = property(lambda self: self._values["log.segment.bytes"])
    log_retention_bytes = property(lambda self: self._values["log.retention.bytes"])
    log_retention_check_interval_ms = property(
        lambda self: self._values["log.retention.check.interval.ms"])
    log_index_size_max_bytes = property(lambda self: self._values["log.index.size.max.bytes"])
    log_index_interval_bytes = property(lambda self: self._values["log.index.interval.bytes"])
    log_flush_interval_messages = property(
        lambda self: self._values["log.flush.interval.messages"])
    log_flush_offset_checkpoint_interval_ms = property(
        lambda self: self._values["log.flush.offset.checkpoint.interval.ms"])
    log_message_timestamp_type = property(lambda self: self._values["log.message.timestamp.type"])
    log_cleanup_policy = property(lambda self: list(self._values["log.cleanup.policy"]))
    compression_type = property(lambda self: self._values["compression.type"])
    fetch_max_bytes = property(lambda self: self._values["fetch.max.bytes"])
    replica_fetch_max_bytes = property(lambda self: self._values["replica.fetch.max.bytes"])
    replica_lag_time_max_ms = property(lambda self: self._values["replica.lag.time.max.ms"])
    min_insync_replicas = property(lambda self: self._values["min.insync.replicas"])
    unclean_leader_election_enable = property(
        lambda self: self._values["unclean.leader.election.enable"])
    controlled_shutdown_enable = property(lambda self: self._values["controlled.shutdown.enable"])
    offsets_topic_num_partitions = property(
        lambda self: self._values["offsets.topic.num.partitions"])
    offsets_topic_replication_factor = property(
        lambda self: self._values["offsets.topic.replication.factor"])
    offsets_retention_minutes = property(lambda self: self._values["offsets.retention.minutes"])
    group_initial_rebalance_delay_ms = property(
        lambda self: self._values["group.initial.rebalance.delay.ms"])
    group_min_session_timeout_ms = property(
        lambda self: self._values["group.min.session.timeout.ms"])
    group_max_session_timeout_ms = property(
        lambda self: self._values["group.max.session.timeout.ms"])
    group_max_size = property(lambda self: self._values["group.max.size"])
    transaction_state_log_num_partitions = property(
        lambda self: self._values["transaction.state.log.num.partitions"])
    zookeeper_session_timeout_ms = property(
        lambda self: self._values["zookeeper.session.timeout.ms"])

    @property
    def zookeeper_connect(self) -> str | None:
        """The ZooKeeper connect string, or ``None`` in embedded mode (absent or empty)."""
        return self._values["zookeeper.connect"] or None

    @property
    def embedded_mode(self) -> bool:
        """True when ``zookeeper.connect`` is not set: single node, embedded metadata store."""
        return self.zookeeper_connect is None

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        v = self._values["zookeeper.connection.timeout.ms"]
        return self._values["zookeeper.session.timeout.ms"] if v is None else v

    @property
    def log_retention_ms(self) -> int:
        """Effective retention time in ms: ``.ms`` > ``.minutes`` > ``.hours``; -1 = unlimited."""
        v = self._values
        if v["log.retention.ms"] is not None:
            ms = v["log.retention.ms"]
        elif v["log.retention.minutes"] is not None:
            ms = v["log.retention.minutes"] * 60_000
        else:
            ms = v["log.retention.hours"] * 3_600_000
        return -1 if ms < 0 else ms

    @property
    def log_roll_ms(self) -> int:
        """Effective segment roll time in ms: ``log.roll.ms`` > ``log.roll.hours``."""
        v = self._values
        return v["log.roll.ms"] if v["log.roll.ms"] is not None else v["log.roll.hours"] * 3_600_000

    @property
    def log_roll_jitter_ms(self) -> int:
        v = self._values
        if v["log.roll.jitter.ms"] is not None:
            return v["log.roll.jitter.ms"]
        return v["log.roll.jitter.hours"] * 3_600_000

    @property
    def log_flush_interval_ms(self) -> int:
        """``log.flush.interval.ms``, falling back to ``log.flush.scheduler.interval.ms``."""
        v = self._values["log.flush.interval.ms"]
        return self._values["log.flush.scheduler.interval.ms"] if v is None else v

    @property
    def offsets_retention_ms(self) -> int:
        return self._values["offsets.retention.minutes"] * 60_000

    def topic_config_defaults(self) -> dict[str, str]:
        """Broker-level defaults for topic configs, keyed by topic-config name (string values).

        This is the mapping Kafka applies (``log.segment.bytes`` -> ``segment.bytes``, ...);
        ``storage.LogConfig`` and DescribeConfigs for topics build on it.
        """
        v = self._values
        pairs: dict[str, Any] = {
            "cleanup.policy": ",".join(v["log.cleanup.policy"]),
            "compression.type": v["compression.type"],
            "delete.retention.ms": v["log.cleaner.delete.retention.ms"],
            "file.delete.delay.ms": v["log.segment.delete.delay.ms"],
            "flush.messages": v["log.flush.interval.messages"],
            "flush.ms": self.log_flush_interval_ms,
            "index.interval.bytes": v["log.index.interval.bytes"],
            "max.compaction.lag.ms": v["log.cleaner.max.compaction.lag.ms"],
            "max.message.bytes": v["message.max.bytes"],
            "message.downconversion.enable": v["log.message.downconversion.enable"],
            "message.timestamp.after.max.ms": v["log.message.timestamp.after.max.ms"],
            "message.timestamp.before.max.ms": v["log.message.timestamp.before.max.ms"],
            "message.timestamp.type": v["log.message.timestamp.type"],
            "min.cleanable.dirty.ratio": v["log.cleaner.min.cleanable.ratio"],
            "min.compaction.lag.ms": v["log.cleaner.min.compaction.lag.ms"],
            "min.insync.replicas": v["min.insync.replicas"],
            "preallocate": v["log.preallocate"],
            "retention.bytes": v["log.retention.bytes"],
            "retention.ms": self.log_retention_ms,
            "segment.bytes": v["log.segment.bytes"],
            "segment.index.bytes": v["log.index.size.max.bytes"],
            "segment.jitter.ms": self.log_roll_jitter_ms,
            "segment.ms": self.log_roll_ms,
            "unclean.leader.election.enable": v["unclean.leader.election.enable"],
        }
        return {k: (str(x).lower() if isinstance(x, bool) else str(x)) for k, x in pairs.items()}
