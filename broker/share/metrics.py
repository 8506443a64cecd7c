"""Share-group metrics: Kafka's names where Kafka has the metric, Josef's beyond.

Kafka's (KIP-932 "Metrics", Kafka 4.1+ Yammer names):
- ``kafka.server:type=ShareGroupMetrics,name=ShareAcknowledgement`` (meter: acknowledgement
  requests: ShareAcknowledge, and ShareFetch with acknowledgements),
  ``...,name=RecordAcknowledgement,ackType=Accept|Release|Reject`` (meter: records),
  ``...,name=PartitionLoadTimeMs`` (histogram: loading a share-partition's state).
- ``kafka.server:type=BrokerTopicMetrics,name=TotalShareFetchRequestsPerSec`` /
  ``FailedShareFetchRequestsPerSec`` / ``TotalShareAcknowledgementRequestsPerSec`` /
  ``FailedShareAcknowledgementRequestsPerSec`` (meters; per partition fetched/acknowledged).
- ``kafka.coordinator.group:type=GroupMetadataManager,name=NumShareGroups`` and
  ``...,name=NumShareGroupsEmpty|NumShareGroupsStable`` (gauges; the group coordinator's
  share groups by state), ``kafka.coordinator.share:type=ShareCoordinatorMetrics,
  name=NumPartitions`` / ``WriteLatencyMaxMs`` (the share coordinator).
Josef's (Prometheus families, per share-partition this broker leads, labels group, topic,
partition): ``josef_share_partition_in_flight``, ``..._acquired``, ``..._available``,
``..._delayed`` (records), ``..._pending_dead_letters``; and the meter
``kafka.server:type=ShareGroupMetrics,name=DeadLetterRecordsPerSec`` (records written to
dead-letter topics).
"""

from __future__ import annotations

from broker import metrics
from broker.metrics import NativeFamily

__all__ = ["ShareMetrics"]

_S = "kafka.server:type=ShareGroupMetrics,name="
_T = "kafka.server:type=BrokerTopicMetrics,name="
_ACK_TYPES = {1: "Accept", 2: "Release", 3: "Reject"}


class ShareMetrics:
    def __init__(self) -> None:
        self.acknowledgements = metrics.meter(_S + "ShareAcknowledgement")
        self.record_acks = {t: metrics.meter(f"{_S}RecordAcknowledgement,ackType={name}")
                            for t, name in _ACK_TYPES.items()}
        self.load_time = metrics.histogram(_S + "PartitionLoadTimeMs")
        self.dead_letters = metrics.meter(_S + "DeadLetterRecordsPerSec")
        self.fetch_total = metrics.meter(_T + "TotalShareFetchRequestsPerSec")
        self.fetch_failed = metrics.meter(_T + "FailedShareFetchRequestsPerSec")
        self.ack_total = metrics.meter(_T + "TotalShareAcknowledgementRequestsPerSec")
        self.ack_failed = metrics.meter(_T + "FailedShareAcknowledgementRequestsPerSec")

    def record(self, fetched: dict, ack_codes: dict, acks: dict | None = None) -> None:
        """One ShareFetch/ShareAcknowledge: per-partition results, ack codes, the batches."""
        for r in fetched.values():
            self.fetch_total.mark()
            if r.error:
                self.fetch_failed.mark()
        if ack_codes:
            self.acknowledgements.mark()
        for code in ack_codes.values():
            self.ack_total.mark()
            if code:
                self.ack_failed.mark()
        for tp, batches in (acks or {}).items():
            if ack_codes.get(tp):
                continue
            for b in batches:
                types = b.acknowledge_types
                if len(types) == 1:
                    meter = self.record_acks.get(types[0])
                    if meter is not None:
                        meter.mark(b.last_offset - b.first_offset + 1)
                    continue
                for t in types:
                    meter = self.record_acks.get(t)
                    if meter is not None:
                        meter.mark()

    def register(self, services) -> None:
        metrics.gauge_provider("share-groups", lambda: _gauges(services))
        metrics.native_provider("share-partitions", lambda: _families(services))


def _gauges(services) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    gc = getattr(services, "group_coordinator", None)
    share = getattr(gc, "share", None) if gc is not None else None
    if share is not None:
        base = "kafka.coordinator.group:type=GroupMetadataManager,name="
        groups = list(share.groups.values())
        out.append((base + "NumShareGroups", len(groups)))
        out.append((base + "NumShareGroupsEmpty", sum(1 for g in groups if not g.members)))
        out.append((base + "NumShareGroupsStable", sum(1 for g in groups if g.members)))
    sc = getattr(services, "share_coordinator", None)
    if sc is not None:
        base = "kafka.coordinator.share:type=ShareCoordinatorMetrics,name="
        out.append((base + "NumPartitions", sc.stats()["loaded"]))
        out.append((base + "WriteLatencyMaxMs", max(sc.write_latency_ms, default=0)))
    return out


def _families(services) -> list[NativeFamily]:
    manager = getattr(services, "share_partitions", None)
    if manager is None:
        return []
    cache = services.metadata_cache
    fams = {k: [] for k in ("in_flight", "acquired", "available", "delayed",
                            "pending_dead_letters")}
    for (group, tid, p), sp in list(manager.partitions.items()):
        st = sp.stats()
        labels = {"group": group, "topic": cache.topic_name(tid) or str(tid),
                  "partition": str(p)}
        for k, samples in fams.items():
            samples.append((labels, getattr(st, k)))
    return [NativeFamily(f"josef_share_partition_{k}", "gauge",
                         f"Share-partition records: {k.replace('_', ' ')}", samples)
            for k, samples in fams.items()]
