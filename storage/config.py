"""Per-topic log configuration (Kafka topic-config keys and broker defaults).

`LogConfig.from_props` accepts Kafka's topic-level keys (`segment.bytes`, `retention.ms`, ...)
and broker-level `log.*` keys (`log.segment.bytes`, `log.retention.hours`, ...), so the broker's
server.properties and a topic's overrides map onto one typed object. Units are in the names:
`*_ms` milliseconds, `*_bytes` bytes. Defaults are Kafka's (Kafka docs "Topic Configs").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from protocol.errors import ErrorCode, KafkaError

LONG_MAX = (1 << 63) - 1


@dataclasses.dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes (1 GiB)
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms (7 days)
    segment_jitter_ms: int = 0  # segment.jitter.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes (10 MiB)
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms; -1 = unlimited
    retention_bytes: int = -1  # retention.bytes; -1 = unlimited
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes (1048588)
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact" or both (storage.cleaner)
    flush_interval_messages: int = LONG_MAX  # flush.messages (default: leave it to the OS)
    flush_interval_ms: int = LONG_MAX  # flush.ms
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    preallocate: bool = False  # preallocate (.log preallocation; not implemented)
    compression_type: str = "producer"  # compression.type (storage.recompress)
    # compaction (storage.cleaner; Kafka's LogCleaner)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms (tombstones, 1 day)

    # Kafka topic key -> (field, converter). Broker keys are "log." + topic key, with aliases.
    _KEYS = {
        "segment.bytes": ("segment_bytes", int),
        "segment.ms": ("segment_ms", int),
        "segment.jitter.ms": ("segment_jitter_ms", int),
        "segment.index.bytes": ("segment_index_bytes", int),
        "index.interval.bytes": ("index_interval_bytes", int),
        "retention.ms": ("retention_ms", int),
        "retention.bytes": ("retention_bytes", int),
        "max.message.bytes": ("max_message_bytes", int),
        "message.timestamp.type": ("message_timestamp_type", str),
        "cleanup.policy": ("cleanup_policy", str),
        "flush.messages": ("flush_interval_messages", int),
        "flush.ms": ("flush_interval_ms", int),
        "file.delete.delay.ms": ("file_delete_delay_ms", int),
        "preallocate": ("preallocate", lambda v: str(v).lower() == "true"),
        "compression.type": ("compression_type", lambda v: str(v).strip().lower()),
        "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
        "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
        "max.compaction.lag.ms": ("max_compaction_lag_ms", int),
        "delete.retention.ms": ("delete_retention_ms", int),
    }
    # broker-level names that differ from "log." + topic key
    _BROKER_ALIASES = {
        "log.roll.ms": "segment.ms",
        "log.roll.jitter.ms": "segment.jitter.ms",
        "log.index.size.max.bytes": "segment.index.bytes",
        "log.index.interval.bytes": "index.interval.bytes",
        "message.max.bytes": "max.message.bytes",
        "log.message.timestamp.type": "message.timestamp.type",
        "log.flush.interval.messages": "flush.messages",
        "log.flush.interval.ms": "flush.ms",
        "log.segment.delete.delay.ms": "file.delete.delay.ms",
        "log.preallocate": "preallocate",
        "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
        "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
        "log.cleaner.delete.retention.ms": "delete.retention.ms",
    }

    @classmethod
    def from_props(cls, props: Mapping[str, object], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka keys; unknown keys are ignored. Broker keys `log.retention.hours`
        / `log.retention.minutes` / `log.roll.hours` are honoured with Kafka's precedence
        (ms > minutes > hours). Bad values raise KafkaError(INVALID_CONFIG)."""
        values: dict[str, object] = {}
        hours = {"log.retention.hours": ("retention_ms", 3600_000),
                 "log.retention.minutes": ("retention_ms", 60_000),
                 "log.roll.hours": ("segment_ms", 3600_000)}
        try:
            for key, (field, mult) in hours.items():
                if key in props:
                    v = int(props[key])  # type: ignore[arg-type]
                    values[field] = v * mult if v >= 0 else -1
            for key, raw in props.items():
                topic_key = cls._BROKER_ALIASES.get(key)
                if topic_key is None:
                    topic_key = key[4:] if key.startswith("log.") else key
                spec = cls._KEYS.get(topic_key)
                if spec is None:
                    continue
                field, conv = spec
                values[field] = conv(raw)
        except (TypeError, ValueError) as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid log config: {e}") from e
        cfg = dataclasses.replace(base or cls(), **values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise KafkaError(INVALID_CONFIG) for values Kafka would reject."""
        problems = []
        if self.segment_bytes < 14:
            problems.append("segment.bytes must be >= 14")
        if self.segment_ms < 1:
            problems.append("segment.ms must be >= 1")
        if self.segment_index_bytes < 8:
            problems.append("segment.index.bytes must be >= 8")
        if self.index_interval_bytes < 0:
            problems.append("index.interval.bytes must be >= 0")
        if self.max_message_bytes < 0:
            problems.append("max.message.bytes must be >= 0")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            problems.append("message.timestamp.type must be CreateTime or LogAppendTime")
        if self.compression_type not in ("producer", "uncompressed", "gzip", "snappy", "lz4",
                                         "zstd"):
            problems.append("compression.type must be producer, uncompressed, gzip, snappy, "
                            "lz4 or zstd")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            problems.append("min.cleanable.dirty.ratio must be in [0, 1]")
        if self.min_compaction_lag_ms < 0 or self.delete_retention_ms < 0:
            problems.append("min.compaction.lag.ms and delete.retention.ms must be >= 0")
        if self.max_compaction_lag_ms < 1:
            problems.append("max.compaction.lag.ms must be >= 1")
        if problems:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "; ".join(problems))

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """cleanup.policy includes `compact` (the log cleaner owns the log's old segments)."""
        return "compact" in self.cleanup_policy
