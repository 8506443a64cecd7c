"""The broker configuration keys Josef knows: Kafka's names, types, defaults and valid values.

Names, types, defaults and ranges follow Kafka 3.9's "Broker Configs" documentation
(``kafka.apache.org/documentation/#brokerconfigs``). ``read_only`` is what Kafka's
DescribeConfigs reports: False for keys Kafka can update dynamically (per-broker or
cluster-wide), True otherwise. ``sensitive`` keys (type PASSWORD) are never shown in
DescribeConfigs or logs.

Parsing and cross-key checks live in :mod:`broker.config`; this module is data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from common.config_error import SENSITIVE_KEYS

__all__ = [
    "LISTENER_PREFIX",
    "listener_key",
    "ConfigType",
    "ConfigSource",
    "Range",
    "OneOf",
    "ConfigKey",
    "BROKER_CONFIG_KEYS",
    "LONG_MAX",
    "INT_MAX",
    "LISTENER_KEY_PREFIXES",
    "LISTENER_KEYS",
    "MECHANISM_KEYS",
    "KAFKA_DYNAMIC_BROKER_CONFIGS",
    "DYNAMIC_NOT_APPLIED",
    "DYNAMIC_AT_RESTART",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigType(enum.IntEnum):
    """Value types, numbered as DescribeConfigs (v3+) ``ConfigType`` reports them."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Where a value came from, numbered as DescribeConfigs (v1+) ``ConfigSource``."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7  # KIP-714 (issue 16)


@dataclass(frozen=True)
class Range:
    """Inclusive numeric range; ``None`` means unbounded. Shown as Kafka shows it: ``[1,...]``."""

    low: float | None = None
    high: float | None = None

    def accepts(self, value: Any) -> bool:
        if value is None:
            return True
        if self.low is not None and value < self.low:
            return False
        return self.high is None or value <= self.high

    def __str__(self) -> str:
        if self.high is None:
            return f"[{self.low},...]"
        if self.low is None:
            return f"[...,{self.high}]"
        return f"[{self.low},...,{self.high}]"


@dataclass(frozen=True)
class OneOf:
    """Value (or, for LIST keys, every element) must be one of ``values``."""

    values: tuple[str, ...]
    case_insensitive: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None:
            return True
        items = value if isinstance(value, list) else [value]
        if self.case_insensitive:
            allowed = {v.lower() for v in self.values}
            return all(str(i).lower() in allowed for i in items)
        return all(i in self.values for i in items)

    def __str__(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ConfigKey:
    """One broker configuration key. ``default`` is the parsed default (``None`` = null)."""

    name: str
    type: ConfigType
    default: Any
    validator: Range | OneOf | None = None
    read_only: bool = True
    sensitive: bool = False


_T = ConfigType
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _k(name, type_, default, validator=None, *, dynamic=False):
    if type_ is ConfigType.PASSWORD:
        SENSITIVE_KEYS.add(name)  # never shown in a ConfigError
    return ConfigKey(name, type_, default, validator, read_only=not dynamic,
                     sensitive=type_ is ConfigType.PASSWORD)


_KEYS = [
    # --- server basics ---
    _k("broker.id", _T.INT, -1),
    _k("broker.id.generation.enable", _T.BOOLEAN, True),
    _k("reserved.broker.max.id", _T.INT, 1000, Range(0)),
    _k("broker.rack", _T.STRING, None),
    # --- socket server ---
    _k("listeners", _T.STRING, "PLAINTEXT://:9092", dynamic=True),
    _k("advertised.listeners", _T.STRING, None, dynamic=True),
    _k("listener.security.protocol.map", _T.STRING,
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       dynamic=True),
    _k("inter.broker.listener.name", _T.STRING, None),
    _k("security.inter.broker.protocol", _T.STRING, "PLAINTEXT", OneOf(_SECURITY_PROTOCOLS)),
    _k("control.plane.listener.name", _T.STRING, None),
    _k("num.network.threads", _T.INT, 3, Range(1), dynamic=True),
    _k("num.io.threads", _T.INT, 8, Range(1), dynamic=True),
    _k("background.threads", _T.INT, 10, Range(1), dynamic=True),
    _k("queued.max.requests", _T.INT, 500, Range(1)),
    _k("queued.max.request.bytes", _T.LONG, -1),
    _k("socket.send.buffer.bytes", _T.INT, 102400),
    _k("socket.receive.buffer.bytes", _T.INT, 102400),
    _k("socket.request.max.bytes", _T.INT, 104857600, Range(1)),
    _k("socket.listen.backlog.size", _T.INT, 50, Range(1)),
    _k("connections.max.idle.ms", _T.LONG, 600000),
    _k("max.connections", _T.INT, INT_MAX, Range(0), dynamic=True),
    _k("max.connections.per.ip", _T.INT, INT_MAX, Range(0), dynamic=True),
    # --- log basics ---
    _k("log.dir", _T.STRING, "/tmp/kafka-logs"),
    _k("log.dirs", _T.STRING, None),
    _k("num.partitions", _T.INT, 1, Range(1)),
    _k("default.replication.factor", _T.INT, 1),
    _k("auto.create.topics.enable", _T.BOOLEAN, True),
    _k("delete.topic.enable", _T.BOOLEAN, True),
    _k("num.recovery.threads.per.data.dir", _T.INT, 1, Range(1), dynamic=True),
    _k("message.max.bytes", _T.INT, 1048588, Range(0), dynamic=True),
    _k("compression.type", _T.STRING, "producer",
       OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")), dynamic=True),
    _k("compression.gzip.level", _T.INT, -1, dynamic=True),
    _k("compression.lz4.level", _T.INT, 9, Range(1, 17), dynamic=True),
    _k("compression.zstd.level", _T.INT, 3, Range(-131072, 22), dynamic=True),
    # --- segments, roll, retention ---
    _k("log.segment.bytes", _T.INT, 1073741824, Range(14), dynamic=True),
    _k("log.roll.ms", _T.LONG, None, dynamic=True),
    _k("log.roll.hours", _T.INT, 168, Range(1)),
    _k("log.roll.jitter.ms", _T.LONG, None, dynamic=True),
    _k("log.roll.jitter.hours", _T.INT, 0, Range(0)),
    _k("log.retention.ms", _T.LONG, None, dynamic=True),
    _k("log.retention.minutes", _T.INT, None),
    _k("log.retention.hours", _T.INT, 168),
    _k("log.retention.bytes", _T.LONG, -1, dynamic=True),
    _k("log.retention.check.interval.ms", _T.LONG, 300000, Range(1)),
    _k("log.segment.delete.delay.ms", _T.LONG, 60000, Range(0), dynamic=True),
    _k("log.index.size.max.bytes", _T.INT, 10485760, Range(4), dynamic=True),
    _k("log.index.interval.bytes", _T.INT, 4096, Range(0), dynamic=True),
    _k("log.preallocate", _T.BOOLEAN, False, dynamic=True),
    # --- flush and checkpoints ---
    _k("log.flush.interval.messages", _T.LONG, LONG_MAX, Range(1), dynamic=True),
    _k("log.flush.interval.ms", _T.LONG, None, dynamic=True),
    _k("log.flush.scheduler.interval.ms", _T.LONG, LONG_MAX),
    _k("log.flush.offset.checkpoint.interval.ms", _T.INT, 60000, Range(0)),
    _k("log.flush.start.offset.checkpoint.interval.ms", _T.INT, 60000, Range(0)),
    # --- message format ---
    _k("log.message.timestamp.type", _T.STRING, "CreateTime",
       OneOf(("CreateTime", "LogAppendTime")), dynamic=True),
    _k("log.message.timestamp.difference.max.ms", _T.LONG, LONG_MAX, Range(0), dynamic=True),
    _k("log.message.timestamp.before.max.ms", _T.LONG, LONG_MAX, Range(0), dynamic=True),
    _k("log.message.timestamp.after.max.ms", _T.LONG, LONG_MAX, Range(0), dynamic=True),
    _k("log.message.downconversion.enable", _T.BOOLEAN, True, dynamic=True),
    # --- cleaner ---
    _k("log.cleanup.policy", _T.LIST, ["delete"], OneOf(("compact", "delete")), dynamic=True),
    _k("log.cleaner.enable", _T.BOOLEAN, True),
    _k("log.cleaner.threads", _T.INT, 1, Range(0), dynamic=True),
    _k("log.cleaner.backoff.ms", _T.LONG, 15000, Range(0), dynamic=True),
    _k("log.cleaner.dedupe.buffer.size", _T.LONG, 134217728, dynamic=True),
    _k("log.cleaner.io.buffer.size", _T.INT, 524288, Range(0), dynamic=True),
    _k("log.cleaner.io.buffer.load.factor", _T.DOUBLE, 0.9, dynamic=True),
    _k("log.cleaner.io.max.bytes.per.second", _T.DOUBLE, 1.7976931348623157e308, dynamic=True),
    _k("log.cleaner.delete.retention.ms", _T.LONG, 86400000, Range(0), dynamic=True),
    _k("log.cleaner.min.compaction.lag.ms", _T.LONG, 0, Range(0), dynamic=True),
    _k("log.cleaner.max.compaction.lag.ms", _T.LONG, LONG_MAX, Range(1), dynamic=True),
    _k("log.cleaner.min.cleanable.ratio", _T.DOUBLE, 0.5, Range(0, 1), dynamic=True),
    # --- replication ---
    _k("min.insync.replicas", _T.INT, 1, Range(1), dynamic=True),
    _k("unclean.leader.election.enable", _T.BOOLEAN, False, dynamic=True),
    _k("replica.lag.time.max.ms", _T.LONG, 30000),
    _k("replica.fetch.max.bytes", _T.INT, 1048576, Range(0)),
    _k("replica.fetch.response.max.bytes", _T.INT, 10485760, Range(0)),
    _k("replica.fetch.wait.max.ms", _T.INT, 500),
    _k("replica.fetch.min.bytes", _T.INT, 1),
    _k("replica.fetch.backoff.ms", _T.INT, 1000, Range(0)),
    _k("replica.socket.timeout.ms", _T.INT, 30000),
    _k("replica.socket.receive.buffer.bytes", _T.INT, 65536),
    _k("replica.high.watermark.checkpoint.interval.ms", _T.LONG, 5000),
    _k("num.replica.fetchers", _T.INT, 1, dynamic=True),
    # --- replication (issue 12): throttles (KIP-73, dynamic in Kafka), KIP-392, IBP ---
    _k("leader.replication.throttled.rate", _T.LONG, LONG_MAX, Range(0), dynamic=True),
    _k("follower.replication.throttled.rate", _T.LONG, LONG_MAX, Range(0), dynamic=True),
    _k("replication.quota.window.num", _T.INT, 11, Range(1)),
    _k("replication.quota.window.size.seconds", _T.INT, 1, Range(1)),
    _k("replica.selector.class", _T.STRING, None),
    _k("inter.broker.protocol.version", _T.STRING, "3.9-IV0"),
    _k("auto.leader.rebalance.enable", _T.BOOLEAN, True),
    _k("leader.imbalance.check.interval.seconds", _T.LONG, 300, Range(1)),
    _k("leader.imbalance.per.broker.percentage", _T.INT, 10),
    _k("controlled.shutdown.enable", _T.BOOLEAN, True),
    _k("controlled.shutdown.max.retries", _T.INT, 3),
    _k("controlled.shutdown.retry.backoff.ms", _T.LONG, 5000),
    _k("controller.socket.timeout.ms", _T.INT, 30000),
    # --- ZooKeeper (absent zookeeper.connect = Josef's embedded single-node mode) ---
    _k("zookeeper.connect", _T.STRING, None),
    _k("zookeeper.session.timeout.ms", _T.INT, 18000),
    _k("zookeeper.connection.timeout.ms", _T.INT, None),
    _k("zookeeper.max.in.flight.requests", _T.INT, 10, Range(1)),
    _k("zookeeper.set.acl", _T.BOOLEAN, False),
    # --- fetch and purgatories ---
    _k("fetch.max.bytes", _T.INT, 57671680, Range(1024)),
    _k("max.incremental.fetch.session.cache.slots", _T.INT, 1000, Range(0)),
    _k("fetch.purgatory.purge.interval.requests", _T.INT, 1000),
    _k("producer.purgatory.purge.interval.requests", _T.INT, 1000),
    _k("delete.records.purgatory.purge.interval.requests", _T.INT, 1),
    # --- group coordinator and __consumer_offsets ---
    _k("group.initial.rebalance.delay.ms", _T.INT, 3000),
    _k("group.min.session.timeout.ms", _T.INT, 6000),
    _k("group.max.session.timeout.ms", _T.INT, 1800000),
    _k("group.max.size", _T.INT, INT_MAX, Range(1)),
    _k("offsets.topic.num.partitions", _T.INT, 50, Range(1)),
    _k("offsets.topic.replication.factor", _T.SHORT, 3, Range(1)),
    _k("offsets.topic.segment.bytes", _T.INT, 104857600, Range(1)),
    _k("offsets.topic.compression.codec", _T.INT, 0),
    _k("offsets.retention.minutes", _T.INT, 10080, Range(1)),
    _k("offsets.retention.check.interval.ms", _T.LONG, 600000, Range(1)),
    _k("offsets.commit.timeout.ms", _T.INT, 5000, Range(1)),
    _k("offsets.load.buffer.size", _T.INT, 5242880, Range(1)),
    _k("offset.metadata.max.bytes", _T.INT, 4096),
    # --- transaction coordinator and producer ids ---
    _k("transaction.state.log.num.partitions", _T.INT, 50, Range(1)),
    _k("transaction.state.log.replication.factor", _T.SHORT, 3, Range(1)),
    _k("transaction.state.log.min.isr", _T.INT, 2, Range(1)),
    _k("transaction.state.log.segment.bytes", _T.INT, 104857600, Range(1)),
    _k("transaction.max.timeout.ms", _T.INT, 900000, Range(1)),
    _k("transactional.id.expiration.ms", _T.INT, 604800000, Range(1), dynamic=True),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", _T.INT, 10000, Range(1)),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", _T.INT, 3600000, Range(1)),
    _k("producer.id.expiration.ms", _T.INT, 86400000, Range(1), dynamic=True),
    # --- issue 17 (operations): the Prometheus endpoint, off by default ---
    _k("prometheus.listener", _T.STRING, None),
    # --- issue 14 (transactions): the rest of Kafka's transaction keys ---
    _k("transaction.state.log.load.buffer.size", _T.INT, 5242880, Range(1)),
    _k("transaction.partition.verification.enable", _T.BOOLEAN, True, dynamic=True),
    _k("producer.id.expiration.check.interval.ms", _T.INT, 600000, Range(1)),
    _k("request.timeout.ms", _T.INT, 30000, Range(0)),
    # --- issue 16 (the rest of the API table): KIP-966, KIP-848 consumer groups ---
    _k("max.request.partition.size.limit", _T.INT, 2000, Range(1)),
    _k("group.coordinator.rebalance.protocols", _T.LIST, ["classic", "consumer"],
       OneOf(("classic", "consumer", "share"), case_insensitive=True)),
    _k("group.consumer.assignors", _T.LIST, ["uniform", "range"]),
    _k("group.consumer.session.timeout.ms", _T.INT, 45000, Range(1)),
    _k("group.consumer.min.session.timeout.ms", _T.INT, 45000, Range(1)),
    _k("group.consumer.max.session.timeout.ms", _T.INT, 60000, Range(1)),
    _k("group.consumer.heartbeat.interval.ms", _T.INT, 5000, Range(1)),
    _k("group.consumer.min.heartbeat.interval.ms", _T.INT, 5000, Range(1)),
    _k("group.consumer.max.heartbeat.interval.ms", _T.INT, 15000, Range(1)),
    _k("group.consumer.max.size", _T.INT, INT_MAX, Range(1)),
    _k("telemetry.max.bytes", _T.INT, 1048576, Range(1)),
    _k("group.consumer.migration.policy", _T.STRING, "bidirectional",
       OneOf(("disabled", "downgrade", "upgrade", "bidirectional"), case_insensitive=True)),
    # --- issue 28 (share groups, KIP-932): Kafka 4.2's group.share.* and share.coordinator.*
    _k("group.share.session.timeout.ms", _T.INT, 45000, Range(1)),
    _k("group.share.min.session.timeout.ms", _T.INT, 45000, Range(1)),
    _k("group.share.max.session.timeout.ms", _T.INT, 60000, Range(1)),
    _k("group.share.heartbeat.interval.ms", _T.INT, 5000, Range(1)),
    _k("group.share.min.heartbeat.interval.ms", _T.INT, 5000, Range(1)),
    _k("group.share.max.heartbeat.interval.ms", _T.INT, 15000, Range(1)),
    _k("group.share.max.size", _T.INT, 200, Range(1, 1000)),
    _k("group.share.record.lock.duration.ms", _T.INT, 30000, Range(1000, 3600000)),
    _k("group.share.min.record.lock.duration.ms", _T.INT, 15000, Range(1000, 30000)),
    _k("group.share.max.record.lock.duration.ms", _T.INT, 60000, Range(30000, 3600000)),
    _k("group.share.delivery.count.limit", _T.INT, 5, Range(2, 10)),
    _k("group.share.partition.max.record.locks", _T.INT, 2000, Range(100, 10000)),
    _k("group.share.max.share.sessions", _T.INT, 2000, Range(1)),
    _k("share.coordinator.state.topic.num.partitions", _T.INT, 50, Range(1)),
    _k("share.coordinator.state.topic.replication.factor", _T.SHORT, 3, Range(1)),
    _k("share.coordinator.state.topic.min.isr", _T.SHORT, 2, Range(1)),
    _k("share.coordinator.state.topic.segment.bytes", _T.INT, 104857600, Range(1)),
    _k("share.coordinator.state.topic.prune.interval.ms", _T.LONG, 300000, Range(1)),
    _k("share.coordinator.snapshot.update.records.per.snapshot", _T.INT, 500, Range(0, 500)),
    _k("share.coordinator.write.timeout.ms", _T.INT, 5000, Range(1)),
    _k("share.coordinator.load.buffer.size", _T.INT, 5242880, Range(1)),
    # --- security (issue 15): TLS, SASL, authorizer, quotas, connection limits, delegation
    # tokens. Each ssl.*/sasl.* key may also be given per listener as
    # listener.name.<listener>.<key> (and listener.name.<l>.<mechanism>.sasl.jaas.config) ---
    _k("ssl.protocol", _T.STRING, "TLSv1.3", dynamic=True),
    _k("ssl.enabled.protocols", _T.LIST, ["TLSv1.2", "TLSv1.3"],
       OneOf(("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")), dynamic=True),
    _k("ssl.cipher.suites", _T.LIST, [], dynamic=True),
    _k("ssl.keystore.type", _T.STRING, "JKS", OneOf(("JKS", "PKCS12", "PEM"), True),
       dynamic=True),
    _k("ssl.keystore.location", _T.STRING, None, dynamic=True),
    _k("ssl.keystore.password", _T.PASSWORD, None, dynamic=True),
    _k("ssl.key.password", _T.PASSWORD, None, dynamic=True),
    _k("ssl.keystore.certificate.chain", _T.PASSWORD, None, dynamic=True),
    _k("ssl.keystore.key", _T.PASSWORD, None, dynamic=True),
    _k("ssl.truststore.type", _T.STRING, "JKS", OneOf(("JKS", "PKCS12", "PEM"), True),
       dynamic=True),
    _k("ssl.truststore.location", _T.STRING, None, dynamic=True),
    _k("ssl.truststore.password", _T.PASSWORD, None, dynamic=True),
    _k("ssl.truststore.certificates", _T.PASSWORD, None, dynamic=True),
    _k("ssl.client.auth", _T.STRING, "none", OneOf(("required", "requested", "none")),
       dynamic=True),
    _k("ssl.endpoint.identification.algorithm", _T.STRING, "https", dynamic=True),
    _k("ssl.principal.mapping.rules", _T.STRING, "DEFAULT"),
    _k("ssl.keymanager.algorithm", _T.STRING, "SunX509", dynamic=True),
    _k("ssl.trustmanager.algorithm", _T.STRING, "PKIX", dynamic=True),
    _k("ssl.secure.random.implementation", _T.STRING, None, dynamic=True),
    _k("ssl.provider", _T.STRING, None, dynamic=True),
    _k("ssl.engine.factory.class", _T.CLASS, None, dynamic=True),
    _k("ssl.allow.dn.changes", _T.BOOLEAN, False),
    _k("ssl.allow.san.changes", _T.BOOLEAN, False),
    _k("sasl.enabled.mechanisms", _T.LIST, ["GSSAPI"], dynamic=True),
    _k("sasl.mechanism.inter.broker.protocol", _T.STRING, "GSSAPI", dynamic=True),
    _k("sasl.jaas.config", _T.PASSWORD, None, dynamic=True),
    _k("sasl.server.callback.handler.class", _T.CLASS, None),
    _k("sasl.client.callback.handler.class", _T.CLASS, None),
    _k("sasl.login.class", _T.CLASS, None),
    _k("sasl.login.callback.handler.class", _T.CLASS, None),
    _k("sasl.kerberos.service.name", _T.STRING, None, dynamic=True),
    _k("connections.max.reauth.ms", _T.LONG, 0),
    _k("sasl.server.max.receive.size", _T.INT, 524288),
    _k("connection.failed.authentication.delay.ms", _T.INT, 100, Range(0)),
    _k("principal.builder.class", _T.CLASS,
       "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
       dynamic=True),
    _k("authorizer.class.name", _T.STRING, ""),
    _k("super.users", _T.STRING, None),
    _k("allow.everyone.if.no.acl.found", _T.BOOLEAN, False),
    _k("delegation.token.secret.key", _T.PASSWORD, None),
    _k("delegation.token.master.key", _T.PASSWORD, None),
    _k("delegation.token.max.lifetime.ms", _T.LONG, 604800000, Range(1)),
    _k("delegation.token.expiry.time.ms", _T.LONG, 86400000, Range(1)),
    _k("delegation.token.expiry.check.interval.ms", _T.LONG, 3600000, Range(1)),
    _k("quota.window.num", _T.INT, 11, Range(1)),
    _k("quota.window.size.seconds", _T.INT, 1, Range(1)),
    _k("controller.quota.window.num", _T.INT, 11, Range(1)),
    _k("controller.quota.window.size.seconds", _T.INT, 1, Range(1)),
    _k("client.quota.callback.class", _T.CLASS, None),
    _k("max.connections.per.ip.overrides", _T.STRING, "", dynamic=True),
    _k("max.connection.creation.rate", _T.INT, INT_MAX, Range(0), dynamic=True),
    # --- issue 27: the rest of Kafka's dynamic broker configs (DynamicBrokerConfig
    # .AllDynamicConfigs + the broker quota configs): stored and reported; the ones Josef does
    # not act on are in DYNAMIC_NOT_APPLIED ---
    _k("metric.reporters", _T.LIST, [], dynamic=True),
    _k("log.local.retention.ms", _T.LONG, -2, Range(-2), dynamic=True),
    _k("log.local.retention.bytes", _T.LONG, -2, Range(-2), dynamic=True),
    _k("remote.log.index.file.cache.total.size.bytes", _T.LONG, 1073741824, Range(1),
       dynamic=True),
    _k("remote.fetch.max.wait.ms", _T.INT, 500, Range(1), dynamic=True),
    _k("remote.log.manager.copy.max.bytes.per.second", _T.LONG, LONG_MAX, Range(1),
       dynamic=True),
    _k("remote.log.manager.fetch.max.bytes.per.second", _T.LONG, LONG_MAX, Range(1),
       dynamic=True),
    _k("remote.list.offsets.request.timeout.ms", _T.LONG, 30000, Range(1), dynamic=True),
    _k("replica.alter.log.dirs.io.max.bytes.per.second", _T.LONG, LONG_MAX, Range(0),
       dynamic=True),
    _k("sasl.kerberos.kinit.cmd", _T.STRING, "/usr/bin/kinit", dynamic=True),
    _k("sasl.kerberos.ticket.renew.window.factor", _T.DOUBLE, 0.8, dynamic=True),
    _k("sasl.kerberos.ticket.renew.jitter", _T.DOUBLE, 0.05, dynamic=True),
    _k("sasl.kerberos.min.time.before.relogin", _T.LONG, 60000, dynamic=True),
    _k("sasl.kerberos.principal.to.local.rules", _T.LIST, ["DEFAULT"], dynamic=True),
    _k("sasl.login.refresh.window.factor", _T.DOUBLE, 0.8, Range(0.5, 1.0), dynamic=True),
    _k("sasl.login.refresh.window.jitter", _T.DOUBLE, 0.05, Range(0.0, 0.25), dynamic=True),
    _k("sasl.login.refresh.min.period.seconds", _T.SHORT, 60, Range(0, 900), dynamic=True),
    _k("sasl.login.refresh.buffer.seconds", _T.SHORT, 300, Range(0, 3600), dynamic=True),
]

#: Every key Kafka 3.9 updates dynamically (``DynamicBrokerConfig.AllDynamicConfigs``: the
#: TLS key/trust stores, LogCleaner, DynamicLogConfig (the broker synonyms of the topic
#: configs but ``log.message.format.version``), DynamicThreadPool, ``metric.reporters``,
#: DynamicListenerConfig, SocketServer, the producer-state and remote-log keys; plus
#: ``DynamicConfig.Broker``'s quota keys). AlterConfigs / IncrementalAlterConfigs on BROKER
#: accept each of them (a unit test keeps this list and BROKER_CONFIG_KEYS in step).
KAFKA_DYNAMIC_BROKER_CONFIGS = frozenset("""
ssl.keystore.type ssl.keystore.location ssl.keystore.password ssl.key.password
ssl.truststore.type ssl.truststore.location ssl.truststore.password
ssl.keystore.certificate.chain ssl.keystore.key ssl.truststore.certificates
log.cleaner.threads log.cleaner.dedupe.buffer.size log.cleaner.io.buffer.load.factor
log.cleaner.io.buffer.size message.max.bytes log.cleaner.io.max.bytes.per.second
log.cleaner.backoff.ms
log.segment.bytes log.roll.ms log.roll.jitter.ms log.index.size.max.bytes
log.flush.interval.messages log.flush.interval.ms log.retention.bytes log.retention.ms
log.index.interval.bytes log.cleaner.delete.retention.ms log.cleaner.min.compaction.lag.ms
log.cleaner.max.compaction.lag.ms log.segment.delete.delay.ms log.cleaner.min.cleanable.ratio
log.cleanup.policy unclean.leader.election.enable min.insync.replicas compression.type
compression.gzip.level compression.lz4.level compression.zstd.level log.preallocate
log.message.timestamp.type log.message.timestamp.difference.max.ms
log.message.timestamp.before.max.ms log.message.timestamp.after.max.ms
log.message.downconversion.enable log.local.retention.ms log.local.retention.bytes
num.io.threads num.replica.fetchers num.recovery.threads.per.data.dir background.threads
metric.reporters
advertised.listeners listeners listener.security.protocol.map principal.builder.class
ssl.protocol ssl.provider ssl.cipher.suites ssl.enabled.protocols ssl.keymanager.algorithm
ssl.trustmanager.algorithm ssl.endpoint.identification.algorithm
ssl.secure.random.implementation ssl.client.auth ssl.engine.factory.class
sasl.mechanism.inter.broker.protocol sasl.jaas.config sasl.enabled.mechanisms
sasl.kerberos.service.name sasl.kerberos.kinit.cmd sasl.kerberos.ticket.renew.window.factor
sasl.kerberos.ticket.renew.jitter sasl.kerberos.min.time.before.relogin
sasl.kerberos.principal.to.local.rules sasl.login.refresh.window.factor
sasl.login.refresh.window.jitter sasl.login.refresh.min.period.seconds
sasl.login.refresh.buffer.seconds max.connections max.connection.creation.rate
num.network.threads
max.connections.per.ip max.connections.per.ip.overrides
producer.id.expiration.ms transaction.partition.verification.enable
remote.log.index.file.cache.total.size.bytes remote.fetch.max.wait.ms
remote.log.manager.copy.max.bytes.per.second remote.log.manager.fetch.max.bytes.per.second
remote.list.offsets.request.timeout.ms
leader.replication.throttled.rate follower.replication.throttled.rate
replica.alter.log.dirs.io.max.bytes.per.second
""".split())

#: Dynamic keys Josef stores and reports but does not act on (a change is logged as a
#: warning naming the key): Kerberos and SASL login refresh (no GSSAPI, no broker-side
#: login), Java TLS providers, tiered storage, JMX reporters, custom principal builders,
#: thread pools an asyncio broker does not have, unimplemented throttles.
DYNAMIC_NOT_APPLIED = frozenset("""
sasl.kerberos.service.name sasl.kerberos.kinit.cmd sasl.kerberos.ticket.renew.window.factor
sasl.kerberos.ticket.renew.jitter sasl.kerberos.min.time.before.relogin
sasl.kerberos.principal.to.local.rules sasl.login.refresh.window.factor
sasl.login.refresh.window.jitter sasl.login.refresh.min.period.seconds
sasl.login.refresh.buffer.seconds
ssl.provider ssl.keymanager.algorithm ssl.trustmanager.algorithm
ssl.secure.random.implementation ssl.engine.factory.class
log.local.retention.ms log.local.retention.bytes remote.log.index.file.cache.total.size.bytes
remote.fetch.max.wait.ms remote.log.manager.copy.max.bytes.per.second
remote.log.manager.fetch.max.bytes.per.second remote.list.offsets.request.timeout.ms
metric.reporters principal.builder.class num.network.threads background.threads
log.cleaner.io.max.bytes.per.second replica.alter.log.dirs.io.max.bytes.per.second
""".split())

#: Dynamic keys Josef reads only at startup: stored, applied after a restart (a warning says
#: so). Kafka applies them live.
DYNAMIC_AT_RESTART = frozenset("""
listeners advertised.listeners listener.security.protocol.map sasl.enabled.mechanisms
sasl.jaas.config sasl.mechanism.inter.broker.protocol max.connections max.connections.per.ip
max.connections.per.ip.overrides max.connection.creation.rate
num.recovery.threads.per.data.dir
""".split())

#: Keys that may be given per listener (``listener.name.<listener>.<key>``, Kafka's
#: ``ListenerName.configPrefix``); the SASL ones also per mechanism
#: (``listener.name.<listener>.<mechanism lowercase>.<key>``).
LISTENER_KEY_PREFIXES = ("ssl.", "sasl.")
LISTENER_KEYS = ("max.connections", "max.connection.creation.rate", "connections.max.reauth.ms")
MECHANISM_KEYS = ("sasl.jaas.config", "sasl.server.callback.handler.class",
                  "sasl.login.callback.handler.class", "sasl.login.class",
                  "connections.max.reauth.ms")

#: Every known key, by name, in documentation order.
BROKER_CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}


LISTENER_PREFIX = "listener.name."

def listener_key(name: str) -> tuple[str, str, ConfigKey] | None:
    """``listener.name.<l>.<key>`` -> (LISTENER, key, ConfigKey of key);
    ``listener.name.<l>.<mechanism>.<key>`` -> (LISTENER, "<mechanism>.<key>", ConfigKey);
    None for any other name (Kafka's ``ListenerName.configPrefix``)."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, rest = name[len(LISTENER_PREFIX):].partition(".")
    if not listener or not rest:
        return None
    key = BROKER_CONFIG_KEYS.get(rest)
    if key is not None and (rest.startswith(LISTENER_KEY_PREFIXES) or rest in LISTENER_KEYS):
        return listener.upper(), rest, key
    mechanism, _, base = rest.partition(".")
    if base not in MECHANISM_KEYS or not mechanism:
        return None
    return listener.upper(), f"{mechanism.lower()}.{base}", BROKER_CONFIG_KEYS[base]
