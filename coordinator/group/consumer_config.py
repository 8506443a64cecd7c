"""``group.consumer.*`` settings of the KIP-848 consumer-group coordinator (Kafka's
``GroupCoordinatorConfig``, consumer part): session timeout and heartbeat interval (ms, with
their min/max bounds checked at startup), ``group.consumer.max.size``,
``group.consumer.assignors`` (``uniform``, ``range`` or their Kafka class names),
``group.consumer.migration.policy`` (``upgrade``/``downgrade``/``bidirectional``/``disabled``)
and ``group.coordinator.rebalance.protocols``. A bad value raises ``ConfigError`` naming the
key.
"""

from __future__ import annotations

from common.config_error import ConfigError
from coordinator.group.assignors import ASSIGNORS

__all__ = ["ASSIGNOR_CLASSES", "ConsumerGroupConfig"]

#: Kafka's assignor class names -> ours
ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


class ConsumerGroupConfig:
    """``group.consumer.*`` settings (times in ms). ``group_overrides(group_id, session_ms,
    heartbeat_ms) -> (session_ms, heartbeat_ms)``, when set, applies a group's
    ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` (GROUP config
    resources, broker.group_configs)."""

    group_overrides = None

    def __init__(self, session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                 max_size: int = 2**31 - 1, assignors: tuple[str, ...] = ("uniform", "range"),
                 migration_policy: str = "bidirectional", classic_max_size: int = 2**31 - 1,
                 enabled: bool = True) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.assignors = tuple(ASSIGNOR_CLASSES.get(a, a) for a in assignors)
        unknown = [a for a in self.assignors if a not in ASSIGNORS]
        if unknown or not self.assignors:
            raise ConfigError("group.consumer.assignors", ",".join(assignors),
                              "uniform, range (or their Kafka class names)")
        self.migration_policy = migration_policy.lower()
        self.classic_max_size = classic_max_size
        self.enabled = enabled

    def timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a group, in ms."""
        if self.group_overrides is None:
            return self.session_timeout_ms, self.heartbeat_interval_ms
        return self.group_overrides(group_id, self.session_timeout_ms,
                                    self.heartbeat_interval_ms)

    @classmethod
    def from_kafka_config(cls, config) -> ConsumerGroupConfig:
        """Raises ConfigError (startup stops naming the key) for a session timeout or
        heartbeat interval outside its min/max, as Kafka's GroupCoordinatorConfig."""
        for name in ("session.timeout.ms", "heartbeat.interval.ms"):
            key = f"group.consumer.{name}"
            lo = config.get(f"group.consumer.min.{name}")
            hi = config.get(f"group.consumer.max.{name}")
            if not lo <= config.get(key) <= hi:
                raise ConfigError(key, config.get(key), f"in [{lo},...,{hi}] "
                                  f"(group.consumer.min/max.{name})")
        protocols = [p.lower() for p in config.get("group.coordinator.rebalance.protocols")]
        return cls(session_timeout_ms=config.get("group.consumer.session.timeout.ms"),
                   heartbeat_interval_ms=config.get("group.consumer.heartbeat.interval.ms"),
                   max_size=config.get("group.consumer.max.size"),
                   assignors=tuple(config.get("group.consumer.assignors")),
                   migration_policy=config.get("group.consumer.migration.policy"),
                   classic_max_size=config.get("group.max.size"),
                   enabled="consumer" in protocols)

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")
