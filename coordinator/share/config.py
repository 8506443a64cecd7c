"""Per share-partition settings: Kafka's share-group configs plus Josef's redelivery and DLQ keys.

Broker defaults (`group.share.*`, server.properties) and the per-group overrides (`share.*`,
IncrementalAlterConfigs on a GROUP resource) resolve, in phase B, into one immutable
`SharePartitionConfig` handed to each `SharePartition`:

    key (group / broker)                         field                      default
    share.record.lock.duration.ms /
      group.share.record.lock.duration.ms        record_lock_duration_ms    30000 ms
    share.delivery.count.limit /
      group.share.delivery.count.limit           delivery_count_limit       5
    share.partition.max.record.locks /
      group.share.partition.max.record.locks     max_record_locks           2000 records
    share.auto.offset.reset                      auto_offset_reset          latest
    share.isolation.level                        isolation_level            read_uncommitted
    share.redelivery.backoff.ms      (Josef)     redelivery_backoff_ms      0 ms (off)
    share.redelivery.backoff.max.ms  (Josef)     redelivery_backoff_max_ms  60000 ms
    errors.deadletterqueue.topic.name (KIP-1191) dead_letter_topic          None (off)

`share.auto.offset.reset` takes `earliest`, `latest` or `by_duration:<ISO-8601 duration>`
(KIP-1106, e.g. `by_duration:PT1H`). Bad values raise `ValueError` naming the key, so a bad
config stops startup (or an IncrementalAlterConfigs answers INVALID_CONFIG) instead of being
half-applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "AutoOffsetReset",
    "SharePartitionConfig",
    "parse_auto_offset_reset",
    "parse_iso8601_duration_ms",
]

DEFAULT_RECORD_LOCK_DURATION_MS = 30_000
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_MAX_RECORD_LOCKS = 2000
DEFAULT_REDELIVERY_BACKOFF_MS = 0
DEFAULT_REDELIVERY_BACKOFF_MAX_MS = 60_000

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

# Java's Duration.parse accepts PnDTnHnMn.nS (days, hours, minutes, fractional seconds).
_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,9})?)S)?)?$",
    re.IGNORECASE,
)


def parse_iso8601_duration_ms(text: str) -> int:
    """`PT1H` -> 3600000. Days, hours, minutes and (fractional) seconds; no sign.

    Raises ValueError for anything else (including `P`, `PT` and negative durations).
    """
    m = _DURATION.match(text.strip())
    if m is None or not any(m.group(g) for g in "dhms"):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    days = int(m.group("d") or 0)
    hours = int(m.group("h") or 0)
    minutes = int(m.group("m") or 0)
    seconds = float(m.group("s") or 0)
    return ((days * 24 + hours) * 60 + minutes) * 60_000 + int(round(seconds * 1000))


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """Where a share-partition without persisted state starts (KIP-932, KIP-1106).

    `strategy` is "earliest" (log start offset), "latest" (high watermark, or the last stable
    offset under read_committed) or "by_duration" (the first offset whose timestamp is at or
    after now - `duration_ms`; latest when there is none).
    """

    strategy: str = "latest"
    duration_ms: int = 0


def parse_auto_offset_reset(value: str) -> AutoOffsetReset:
    """Parse `share.auto.offset.reset`; ValueError names the key on a bad value."""
    text = value.strip().lower()
    if text in ("earliest", "latest"):
        return AutoOffsetReset(text)
    if text.startswith("by_duration:"):
        try:
            return AutoOffsetReset("by_duration", parse_iso8601_duration_ms(text[12:]))
        except ValueError as exc:
            raise ValueError(f"share.auto.offset.reset: {exc}") from None
    raise ValueError(
        f"share.auto.offset.reset must be earliest, latest or by_duration:<ISO-8601>, "
        f"got {value!r}"
    )


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    """The settings one share-partition runs with (see the module table for keys/defaults).

    `redelivery_delay_ms(n)` is Josef's redelivery backoff after the n-th delivery attempt:
    `min(redelivery_backoff_ms * 2**(n-1), redelivery_backoff_max_ms)`, 0 when off. There is no
    jitter, so a record's earliest redelivery time is exact.
    """

    record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS
    delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT
    max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset()
    isolation_level: str = READ_UNCOMMITTED
    redelivery_backoff_ms: int = DEFAULT_REDELIVERY_BACKOFF_MS
    redelivery_backoff_max_ms: int = DEFAULT_REDELIVERY_BACKOFF_MAX_MS
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        _check(self.record_lock_duration_ms >= 1, "share.record.lock.duration.ms", ">= 1")
        # Kafka bounds group.share.delivery.count.limit to [2, 10].
        _check(2 <= self.delivery_count_limit <= 10, "share.delivery.count.limit", "in [2, 10]")
        _check(self.max_record_locks >= 1, "share.partition.max.record.locks", ">= 1")
        _check(self.isolation_level in (READ_UNCOMMITTED, READ_COMMITTED),
               "share.isolation.level", "read_committed or read_uncommitted")
        _check(self.redelivery_backoff_ms >= 0, "share.redelivery.backoff.ms", ">= 0")
        _check(self.redelivery_backoff_max_ms >= self.redelivery_backoff_ms,
               "share.redelivery.backoff.max.ms", ">= share.redelivery.backoff.ms")
        _check(self.dead_letter_topic is None or bool(self.dead_letter_topic.strip()),
               "errors.deadletterqueue.topic.name", "a topic name")

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    def redelivery_delay_ms(self, delivery_count: int) -> int:
        """Backoff (ms) before a record delivered `delivery_count` times is Available again."""
        base = self.redelivery_backoff_ms
        if base <= 0 or delivery_count <= 0:
            return 0
        # Cap the exponent: 2**62 ms is far past any max, and big ints cost time.
        return min(base << min(delivery_count - 1, 62), self.redelivery_backoff_max_ms)


def _check(ok: bool, key: str, expected: str) -> None:
    if not ok:
        raise ValueError(f"{key} must be {expected}")
