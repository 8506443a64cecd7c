"""Kafka's BrokerTopicMetrics (``kafka.server:type=BrokerTopicMetrics,name=...PerSec``), per
topic (``topic=<name>``) and for all topics (no ``topic`` key), as Kafka's
``BrokerTopicStats`` keeps them.

Recorded by the Produce and Fetch handlers from their per-partition results (one call per
request): ``TotalProduceRequestsPerSec`` / ``TotalFetchRequestsPerSec`` count partitions
(Kafka marks them once per partition of a request), ``FailedProduceRequestsPerSec`` /
``FailedFetchRequestsPerSec`` partitions answered with an unexpected error (Kafka leaves out
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION and the other errors a client simply
retries), ``MessagesInPerSec`` / ``BytesInPerSec`` what was appended, ``BytesRejectedPerSec``
batches refused as too large, ``BytesOutPerSec`` record bytes sent to consumers
(``ReplicationBytesOutPerSec`` for followers, all-topics only), and the message-format
conversion meters.
"""

from __future__ import annotations

from broker.metrics.core import Meter, MetricsRegistry
from protocol.errors import ErrorCode

__all__ = ["BrokerTopicStats"]

_BASE = "kafka.server:type=BrokerTopicMetrics,name="
_PER_TOPIC = ("MessagesInPerSec", "BytesInPerSec", "BytesOutPerSec", "BytesRejectedPerSec",
              "TotalProduceRequestsPerSec", "TotalFetchRequestsPerSec",
              "FailedProduceRequestsPerSec", "FailedFetchRequestsPerSec",
              "ProduceMessageConversionsPerSec", "FetchMessageConversionsPerSec")
_ALL_ONLY = ("ReplicationBytesInPerSec", "ReplicationBytesOutPerSec")
#: errors Kafka does not count as failed requests (the client's metadata is stale)
_EXPECTED = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER})
_TOO_LARGE = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})


class _Meters:
    __slots__ = _PER_TOPIC + _ALL_ONLY

    def __init__(self, registry: MetricsRegistry, topic: str | None) -> None:
        suffix = "" if topic is None else f",topic={topic}"
        for name in _PER_TOPIC:
            setattr(self, name, registry.meter(_BASE + name + suffix))
        for name in _ALL_ONLY:
            setattr(self, name, registry.meter(_BASE + name) if topic is None else Meter())


class BrokerTopicStats:
    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry
        self.all = _Meters(registry, None)
        self.topics: dict[str, _Meters] = {}

    def topic(self, name: str) -> _Meters:
        m = self.topics.get(name)
        if m is None:
            m = self.topics[name] = _Meters(self.registry, name)
        return m

    def retain(self, topics) -> None:
        """Drop the meters of topics not in ``topics`` (deleted topics; Kafka's
        ``removeMetrics``)."""
        for name in [t for t in self.topics if t not in topics]:
            del self.topics[name]
            for metric in _PER_TOPIC:
                self.registry.remove(_BASE + metric + f",topic={name}")

    def record_produce(self, entries, results, converted: int = 0) -> None:
        """``entries``: {(topic, p): records (bytes-like)}; ``results``: {(topic, p):
        ProducePartitionResult} (may hold partitions that never reached the log)."""
        a = self.all
        for tp, r in results.items():
            t = self.topics.get(tp[0]) or self.topic(tp[0])
            t.TotalProduceRequestsPerSec.count += 1
            a.TotalProduceRequestsPerSec.count += 1
            records = entries.get(tp)
            size = len(records) if records is not None else 0
            if r.error:
                if r.error in _TOO_LARGE:
                    t.BytesRejectedPerSec.count += size
                    a.BytesRejectedPerSec.count += size
                if r.error not in _EXPECTED:
                    t.FailedProduceRequestsPerSec.count += 1
                    a.FailedProduceRequestsPerSec.count += 1
                continue
            n = r.last_offset - r.base_offset + 1 if r.last_offset >= r.base_offset >= 0 else 0
            t.MessagesInPerSec.count += n
            a.MessagesInPerSec.count += n
            t.BytesInPerSec.count += size
            a.BytesInPerSec.count += size
        if converted:
            a.ProduceMessageConversionsPerSec.count += converted

    def record_fetch(self, results, follower: bool, down_converted: bool = False) -> None:
        """``results``: [((topic, p), FetchPartitionData)] or a dict of them."""
        a = self.all
        items = results.items() if hasattr(results, "items") else results
        for tp, data in items:
            t = self.topics.get(tp[0]) or self.topic(tp[0])
            t.TotalFetchRequestsPerSec.count += 1
            a.TotalFetchRequestsPerSec.count += 1
            if data.error:
                if data.error not in _EXPECTED:
                    t.FailedFetchRequestsPerSec.count += 1
                    a.FailedFetchRequestsPerSec.count += 1
                continue
            records = data.records
            size = len(records) if records else 0
            if not size:
                continue
            if follower:
                a.ReplicationBytesOutPerSec.count += size
            else:
                t.BytesOutPerSec.count += size
                a.BytesOutPerSec.count += size
                if down_converted:
                    t.FetchMessageConversionsPerSec.count += 1
                    a.FetchMessageConversionsPerSec.count += 1

    def record_replication_in(self, size: int) -> None:
        """Bytes a follower appended from its leader (the replica fetcher calls this)."""
        self.all.ReplicationBytesInPerSec.count += size
