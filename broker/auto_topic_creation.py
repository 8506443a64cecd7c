"""Topic auto-creation for Metadata requests, bounded (Kafka's AutoTopicCreationManager).

One Metadata request may name any number of unknown topics (a client bug, a scan, an
attack: 100,000 names froze the broker for minutes before). Kafka creates them all; this
broker creates them in bounded, rate-limited batches and answers the others so that the
client retries (its next Metadata request creates the next batch):

- a topic another Metadata request is creating right now answers UNKNOWN_TOPIC_OR_PARTITION
  (Kafka's in-flight topics);
- at most `MAX_TOPICS_PER_REQUEST` (1,000) topics are created per request, and at most
  `PARTITIONS_PER_SECOND` (1,000) partitions per second by the whole broker, a KIP-599 token
  bucket whose burst is ``controller.quota.window.num`` x
  ``controller.quota.window.size.seconds`` of that rate (11 s, 11,000 partitions, with
  Kafka's defaults); a topic beyond either answers UNKNOWN_TOPIC_OR_PARTITION;
- the client's own ``controller_mutation_rate`` quota (KIP-599, when configured): once it is
  exhausted the remaining topics answer THROTTLING_QUOTA_EXCEEDED (89); the partitions
  created count against it and the response carries the throttle time;
- the admitted topics go to the controller in one call (`Controller.auto_create_topics`):
  one store transaction in embedded mode, pipelined ZooKeeper writes in ZooKeeper mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from broker.handlers import throttling
from broker.security.quotas import TokenBucket
from common.loop_slice import LoopSlice
from controller.api import CreatableTopic
from protocol.errors import ErrorCode

MAX_TOPICS_PER_REQUEST = 1000
PARTITIONS_PER_SECOND = 1000.0


def _wall_ms() -> float:
    return time.time() * 1000.0


class AutoTopicCreator:
    """Admits and creates a Metadata request's unknown topics (see the module doc)."""

    def __init__(self, controller: Any, config: Any, *, clock_ms: Callable[[], float] = _wall_ms,
                 max_topics_per_request: int = MAX_TOPICS_PER_REQUEST,
                 partitions_per_second: float = PARTITIONS_PER_SECOND) -> None:
        self.controller = controller
        self.default_partitions = int(config.get("num.partitions")) if config is not None else 1
        window_num = config.get("controller.quota.window.num") if config is not None else 11
        window_s = config.get("controller.quota.window.size.seconds") if config is not None \
            else 1
        self.clock_ms = clock_ms
        self.max_topics_per_request = max_topics_per_request
        self.bucket = TokenBucket(partitions_per_second, window_num * window_s, clock_ms())
        self.in_flight: set[str] = set()
        self.refused = 0  # topics answered UNKNOWN_TOPIC_OR_PARTITION by the bounds

    def _partitions(self, spec: CreatableTopic) -> int:
        return self.default_partitions if spec.num_partitions == -1 else spec.num_partitions

    async def create(self, ctx: Any, specs: list[CreatableTopic]
                     ) -> tuple[list[tuple[str, int]], int]:
        """``(one (name, error code) per spec, in order; the response's throttle time in
        ms)``: the controller's code for the topics created now (NONE, TOPIC_ALREADY_EXISTS,
        ...), UNKNOWN_TOPIC_OR_PARTITION / THROTTLING_QUOTA_EXCEEDED for the others. O(specs),
        giving the event loop way every few ms."""
        slicer = LoopSlice()
        admitted: list[CreatableTopic] = []
        answers: dict[str, int] = {}
        self.bucket.refill(self.clock_ms())
        quota = ctx is not None and throttling.mutation_quota_enabled(ctx)
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for spec in specs:
            await slicer.tick()
            name = spec.name
            if len(admitted) >= self.max_topics_per_request or name in self.in_flight:
                answers[name] = unknown
                continue
            if quota and throttling.mutations_exceeded(ctx):
                answers[name] = ErrorCode.THROTTLING_QUOTA_EXCEEDED
                continue
            n = self._partitions(spec)
            if self.bucket.tokens < n:
                answers[name] = unknown
                continue
            self.bucket.tokens -= n
            if quota:
                throttling.record_mutations(ctx, n)
            admitted.append(spec)
            self.in_flight.add(name)
        self.refused += sum(1 for c in answers.values() if c == unknown)
        if admitted:
            try:
                for r in await self.controller.auto_create_topics(admitted):
                    answers[r.name] = r.error_code
            finally:
                self.in_flight.difference_update(s.name for s in admitted)
        throttle_ms = 0
        if quota:
            throttle_ms = throttling.mutations_exceeded(ctx)
            throttling.throttle(ctx, throttle_ms)
        return [(s.name, int(answers.get(s.name, unknown))) for s in specs], throttle_ms


def auto_topic_creator(broker: Any) -> AutoTopicCreator:
    """The broker's creator (made on first use)."""
    creator = getattr(broker, "auto_topic_creator", None)
    if creator is None or creator.controller is not broker.controller:
        creator = AutoTopicCreator(broker.controller, broker.config)
        broker.auto_topic_creator = creator
    return creator
