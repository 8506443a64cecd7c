"""The narrow timer a share-partition needs (the coordinator runtime's timer).

A share-partition schedules two kinds of timeouts: acquisition-lock expiry
(`share.record.lock.duration.ms`) and, when redelivery backoff is on, the moment a released
record becomes Available again. Both are one-shot callbacks, so the interface is two methods:

    now_ms()                      the timer's monotonic clock, in ms
    schedule(delay_ms, callback)  run `callback()` once, `delay_ms` ms from now; returns a
                                  handle with `cancel()` (True if it was still pending) and
                                  `expiration_ms` (absolute, on the same clock)

The broker implements it over its hierarchical timing wheel
(`broker.coordinator_runtime.WheelTimer` over `SystemTimer`; `MockTimer` with a manual clock
in tests), so no share-group timeout is a scan: each is one O(1) entry in a wheel bucket.
Callbacks run on the event loop thread and must not block.
"""

from __future__ import annotations

from coordinator.runtime import CoordinatorTimer, ScheduledTimeout

__all__ = ["ScheduledTimeout", "ShareTimer"]

#: What a `SharePartition` needs from time: a clock and one-shot callbacks.
ShareTimer = CoordinatorTimer
