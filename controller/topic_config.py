"""Topic-config validation for CreateTopics / AlterConfigs / IncrementalAlterConfigs.

The names, types and ranges are Kafka's topic-level configs (Kafka docs "Topic Configs",
3.9). Only overrides are stored (``/config/topics/<t>``); defaults stay with the broker.
:func:`validate_topic_config` raises ``KafkaError(INVALID_CONFIG)`` for an unknown name, a
null value ("Null value not supported for topic configs"), or a value of the wrong type or
out of range, as Kafka's ``LogConfig.validate`` does. :func:`apply_incremental` applies
IncrementalAlterConfigs operations (SET=0, DELETE=1, APPEND=2, SUBTRACT=3; KIP-339);
APPEND/SUBTRACT on a non-list config is INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from protocol.errors import ErrorCode, KafkaError

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _int(lo: int, hi: int, bits: int = 32) -> Callable[[str], None]:
    lo_t, hi_t = (INT_MIN, INT_MAX) if bits == 32 else (LONG_MIN, LONG_MAX)

    def check(value: str) -> None:
        try:
            n = int(value.strip())
        except ValueError:
            raise ValueError(f"expected a{'n int' if bits == 32 else ' long'}") from None
        if not lo_t <= n <= hi_t:
            raise ValueError("out of the type's range")
        if not lo <= n <= hi:
            raise ValueError(f"must be in [{lo}, {hi}]")

    return check


def _long(lo: int = LONG_MIN, hi: int = LONG_MAX) -> Callable[[str], None]:
    return _int(lo, hi, bits=64)


def _bool(value: str) -> None:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError("expected true or false")


def _one_of(*allowed: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value.strip() not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")

    return check


def _list_of(*allowed: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        items = [v.strip() for v in value.split(",") if v.strip()]
        bad = [v for v in items if allowed and v not in allowed]
        if bad:
            raise ValueError(f"items must be among {', '.join(allowed)}")

    return check


def _ratio(value: str) -> None:
    try:
        x = float(value)
    except ValueError:
        raise ValueError("expected a number") from None
    if not 0.0 <= x <= 1.0:
        raise ValueError("must be in [0, 1]")


def _gzip_level(value: str) -> None:
    _int(-1, 9)(value)
    if int(value) == 0:
        raise ValueError("must be -1 or in [1, 9]")


def _any(value: str) -> None:
    return None


#: Kafka's defaults of the LIST topic configs that are not empty
TOPIC_LIST_DEFAULTS = {"cleanup.policy": "delete"}

# name -> (is_list, validator)
TOPIC_CONFIGS: dict[str, tuple[bool, Callable[[str], None]]] = {
    "cleanup.policy": (True, _list_of("compact", "delete")),
    "compression.type": (
        False, _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    "compression.gzip.level": (False, _gzip_level),
    "compression.lz4.level": (False, _int(1, 17)),
    "compression.zstd.level": (False, _int(-131072, 22)),
    "delete.retention.ms": (False, _long(0)),
    "file.delete.delay.ms": (False, _long(0)),
    "flush.messages": (False, _long(1)),
    "flush.ms": (False, _long(0)),
    "follower.replication.throttled.replicas": (True, _list_of()),
    "index.interval.bytes": (False, _int(0, INT_MAX)),
    "leader.replication.throttled.replicas": (True, _list_of()),
    "local.retention.bytes": (False, _long(-2)),
    "local.retention.ms": (False, _long(-2)),
    "max.compaction.lag.ms": (False, _long(1)),
    "max.message.bytes": (False, _int(0, INT_MAX)),
    "message.downconversion.enable": (False, _bool),
    "message.format.version": (False, _any),
    "message.timestamp.after.max.ms": (False, _long(0)),
    "message.timestamp.before.max.ms": (False, _long(0)),
    "message.timestamp.difference.max.ms": (False, _long(0)),
    "message.timestamp.type": (False, _one_of("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": (False, _ratio),
    "min.compaction.lag.ms": (False, _long(0)),
    "min.insync.replicas": (False, _int(1, INT_MAX)),
    "preallocate": (False, _bool),
    "remote.log.copy.disable": (False, _bool),
    "remote.log.delete.on.disable": (False, _bool),
    "remote.storage.enable": (False, _bool),
    "retention.bytes": (False, _long()),
    "retention.ms": (False, _long(-1)),
    "segment.bytes": (False, _int(14, INT_MAX)),
    "segment.index.bytes": (False, _int(4, INT_MAX)),
    "segment.jitter.ms": (False, _long(0)),
    "segment.ms": (False, _long(1)),
    "unclean.leader.election.enable": (False, _bool),
}


def validate_topic_config(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic-config overrides; returns them as a plain dict. Raises
    ``KafkaError(INVALID_CONFIG)`` naming the first bad key."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {name}"
            )
        try:
            spec[1](value)
        except ValueError as exc:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {exc}"
            ) from None
        out[name] = value
    return out


def topic_list_default(name: str) -> str | None:
    """Kafka's default of a LIST topic config ("" for an empty list); None for other keys."""
    spec = TOPIC_CONFIGS.get(name)
    if spec is None or not spec[0]:
        return None
    return TOPIC_LIST_DEFAULTS.get(name, "")


def apply_incremental(
    current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """Apply IncrementalAlterConfigs ``(name, op, value)`` operations to ``current`` and
    validate the result. APPEND/SUBTRACT start from the override, else from Kafka's default
    (``controller.broker_config_admin.list_op``); an empty result removes the override.
    Unknown op -> INVALID_REQUEST; APPEND/SUBTRACT on a non-list config -> INVALID_REQUEST;
    unknown names / bad values -> INVALID_CONFIG."""
    from controller.broker_config_admin import apply_incremental_ops

    for name, op, _value in ops:
        if op in (OP_APPEND, OP_SUBTRACT) and name not in TOPIC_CONFIGS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    result = apply_incremental_ops(current, ops, topic_list_default)
    for name, op, _value in ops:
        if op in (OP_APPEND, OP_SUBTRACT) and result.get(name) == "":
            result.pop(name)
    return validate_topic_config(result)
