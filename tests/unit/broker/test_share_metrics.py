"""Share-group metrics reach Prometheus under Kafka's names (JMX exporter rules) and Josef's."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.metrics import REGISTRY
from broker.metrics.exporter import render
from broker.share.fetch import PartitionResult
from broker.share.metrics import ShareMetrics
from coordinator.share.share_partition import SharePartitionStats
from coordinator.share.state import AcknowledgementBatch

T = uuid.UUID(int=9)


class _Sp:
    def stats(self):
        return SharePartitionStats(10, 20, 10, 4, 5, 1, 2)


def test_share_metrics_are_exported():
    m = ShareMetrics()
    acks = {(T, 0): [AcknowledgementBatch(0, 9, (1,)), AcknowledgementBatch(10, 11, (2, 3))]}
    m.record({(T, 0): PartitionResult(), (T, 1): PartitionResult(error=6)}, {(T, 0): 0}, acks)
    group = SimpleNamespace(members={"m": 1})
    services = SimpleNamespace(
        group_coordinator=SimpleNamespace(share=SimpleNamespace(groups={"g": group})),
        share_coordinator=None,
        share_partitions=SimpleNamespace(partitions={("g", T, 0): _Sp()}),
        metadata_cache=SimpleNamespace(topic_name=lambda tid: "t"))
    m.register(services)
    try:
        text = render(REGISTRY)[0].decode()
    finally:
        REGISTRY.remove_matching("share")
    assert 'kafka_server_sharegroupmetrics_recordacknowledgement_count{ackType="Accept"} 10' in text
    assert 'kafka_server_sharegroupmetrics_recordacknowledgement_count{ackType="Release"} 1' in text
    assert "kafka_server_brokertopicmetrics_failedsharefetchrequests_total 1" in text
    assert "kafka_coordinator_group_groupmetadatamanager_numsharegroupsstable 1" in text
    assert 'josef_share_partition_acquired{group="g",partition="0",topic="t"} 5' in text
