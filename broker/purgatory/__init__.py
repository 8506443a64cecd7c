"""Delayed operations and the hierarchical timing wheel (Kafka's purgatory, asyncio edition).

- `timer_task`: `TimerTask` (a task is its own list node) and `TimerTaskList` (a bucket).
- `timing_wheel`: `TimingWheel` (worked multi-level example in its docstring), `BucketQueue`.
- `timer`: the `Timer` protocol, `SystemTimer` (asyncio driver task), `MockTimer` (manual clock).
- `delayed_operation`: `DelayedOperation`, `DelayedOperationPurgatory` and the watch keys.
"""

from broker.purgatory.delayed_operation import (
    DelayedOperation,
    DelayedOperationPurgatory,
    FetchSessionKey,
    TopicPartitionKey,
)
from broker.purgatory.timer import MockTime, MockTimer, SystemTimer, Timer
from broker.purgatory.timer_task import TimerTask, TimerTaskList
from broker.purgatory.timing_wheel import BucketQueue, TimingWheel

__all__ = [
    "BucketQueue",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "FetchSessionKey",
    "MockTime",
    "MockTimer",
    "SystemTimer",
    "Timer",
    "TimerTask",
    "TimerTaskList",
    "TimingWheel",
    "TopicPartitionKey",
]
