"""broker.metrics: MBean -> Prometheus names (the JMX exporter's Kafka rules), histogram
buckets and quantiles, the registry snapshot and text rendering, the request recorder."""

from __future__ import annotations

import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics.core import (
    NUM_BUCKETS,
    Histogram,
    MetricsRegistry,
    NativeFamily,
    bucket_bounds,
    bucket_index,
    parse_mbean,
    quantiles,
)
from broker.metrics.exporter import parse_prometheus_listener, render
from broker.metrics.jmx_rules import convert
from broker.metrics.request_metrics import RequestMetricsRecorder, request_name
from broker.metrics.topic_stats import BrokerTopicStats
from broker.replica_manager import ProducePartitionResult
from broker.request_channel import Request
from common.config_error import ConfigError
from protocol.errors import ErrorCode

CASES = [
    ("kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec", "Count",
     "kafka_server_brokertopicmetrics_messagesin_total", {}, "counter"),
    ("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=orders", "Count",
     "kafka_server_brokertopicmetrics_bytesin_total", {"topic": "orders"}, "counter"),
    ("kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version=9",
     "Count", "kafka_network_requestmetrics_requests_total",
     {"request": "Produce", "version": "9"}, "counter"),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer", "Count",
     "kafka_network_requestmetrics_totaltimems_count", {"request": "FetchConsumer"}, "counter"),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce", "99thPercentile",
     "kafka_network_requestmetrics_totaltimems", {"request": "Produce", "quantile": "0.99"},
     "gauge"),
    ("kafka.network:type=RequestMetrics,name=LocalTimeMs,request=Fetch", "999thPercentile",
     "kafka_network_requestmetrics_localtimems", {"request": "Fetch", "quantile": "0.999"},
     "gauge"),
    ("kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions", "Value",
     "kafka_server_replicamanager_underreplicatedpartitions", {}, "gauge"),
    ("kafka.server:type=ReplicaManager,name=IsrShrinksPerSec", "Count",
     "kafka_server_replicamanager_isrshrinks_total", {}, "counter"),
    ("kafka.controller:type=KafkaController,name=ActiveControllerCount", "Value",
     "kafka_controller_kafkacontroller_activecontrollercount", {}, "gauge"),
    ("kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent", "Value",
     "kafka_network_socketserver_networkprocessoravgidlepercent", {}, "gauge"),
    ("kafka.network:type=RequestChannel,name=RequestQueueSize", "Value",
     "kafka_network_requestchannel_requestqueuesize", {}, "gauge"),
    ("kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=Fetch",
     "Value", "kafka_server_delayedoperationpurgatory_purgatorysize",
     {"delayedOperation": "Fetch"}, "gauge"),
    ("kafka.log:type=Log,name=Size,topic=t,partition=3", "Value", "kafka_log_log_size",
     {"topic": "t", "partition": "3"}, "gauge"),
    ("kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "Count",
     "kafka_log_logflushstats_logflushrateandtimems_count", {}, "counter"),
    ("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroupsStable", "Value",
     "kafka_coordinator_group_groupmetadatamanager_numgroupsstable", {}, "gauge"),
    ("kafka.server:type=FetcherLagMetrics,name=ConsumerLag,clientId=ReplicaFetcherThread-0-1,"
     "topic=t,partition=0", "Value", "kafka_server_fetcherlagmetrics_consumerlag",
     {"clientId": "ReplicaFetcherThread-0-1", "topic": "t", "partition": "0"}, "gauge"),
]


@pytest.mark.parametrize("mbean,attr,name,labels,typ", CASES)
def test_jmx_exporter_names(mbean, attr, name, labels, typ):
    c = convert(mbean, attr)
    assert c is not None
    assert (c.name, dict(c.labels), c.type) == (name, labels, typ)


def test_unmatched_mbean_is_not_exported():
    # the generic rules need a one-word domain after "kafka."
    assert convert("kafka.coordinator.group:type=X,name=YPerSec", "Count") is None


def test_parse_mbean_rejects_garbage():
    assert parse_mbean("kafka.log:type=Log,name=Size") == (
        "kafka.log", (("type", "Log"), ("name", "Size")))
    for bad in ("nodomain", "kafka.log:", "kafka.log:type"):
        with pytest.raises(ValueError):
            parse_mbean(bad)


def test_bucket_index_is_monotonic_and_inverse_of_bounds():
    last = -1
    for x in sorted(set(range(5000)) | {2**k + d for k in range(12, 52) for d in (-1, 0, 1)}):
        i = bucket_index(x)
        assert i >= last
        last = i
        low, high = bucket_bounds(i)
        assert low <= x < high, (x, i, low, high)
    assert bucket_index(2**60) == NUM_BUCKETS - 1


def test_histogram_quantiles_within_bucket_resolution():
    rng = random.Random(7)
    h = Histogram()
    values = [rng.expovariate(1 / 20.0) for _ in range(20000)]  # ms, mean 20
    for v in values:
        h.update(v)
    assert h.count == 20000 and h.sum == pytest.approx(sum(values))
    values.sort()
    for q, est in zip((0.5, 0.99), quantiles(h.counts, h.scale, (0.5, 0.99)), strict=True):
        true = values[int(q * len(values))]
        assert abs(est - true) / true < 0.2, (q, est, true)
    assert quantiles([0] * NUM_BUCKETS, 1000.0, (0.5,)) == [0.0]


def test_histogram_window_forgets_old_values():
    h = Histogram()
    for _ in range(100):
        h.update(1000.0)  # old, slow
    assert h.window_counts(now=0.0) == h.counts  # first snapshot
    for _ in range(100):
        h.update(1.0)
    counts = h.window_counts(now=400.0)  # > 5 minutes later: only what came since t=0
    assert sum(counts) == 100
    assert quantiles(counts, h.scale, (0.99,))[0] < 2.0


def _families(registry) -> dict:
    text = render(registry)[0].decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_render_meters_gauges_histograms_native_and_process():
    reg = MetricsRegistry()
    reg.meter("kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec").mark(5)
    reg.meter("kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=a").mark(3)
    reg.gauge("kafka.server:type=ReplicaManager,name=LeaderCount", lambda: 7)
    reg.gauge("kafka.server:type=ReplicaManager,name=PartitionCount", lambda: 1 / 0)
    reg.gauge_provider("logs", lambda: [("kafka.log:type=Log,name=Size,topic=a,partition=0",
                                         123)])
    h = reg.histogram("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce")
    for v in (1.0, 2.0, 3.0, 100.0):
        h.update(v)
    reg.native_provider("lag", lambda: [NativeFamily(
        "kafka_consumergroup_lag", "gauge", "lag",
        [({"consumergroup": "g", "topic": "a", "partition": "0"}, 4)])])
    snap = reg.snapshot()
    assert snap.errors and "PartitionCount" in snap.errors[0]
    got = _families(reg)
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", ())] == 5
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "a"),))] == 3
    assert got[("kafka_server_replicamanager_leadercount", ())] == 7
    assert ("kafka_server_replicamanager_partitioncount", ()) not in got
    assert got[("kafka_log_log_size", (("partition", "0"), ("topic", "a")))] == 123
    rq = (("request", "Produce"),)
    assert got[("kafka_network_requestmetrics_totaltimems_count", rq)] == 4
    assert got[("kafka_network_requestmetrics_totaltimems_sum", rq)] == 106
    p50 = got[("kafka_network_requestmetrics_totaltimems", (("quantile", "0.50"), *rq))]
    assert 1.0 <= p50 <= 3.0
    assert got[("kafka_consumergroup_lag",
                (("consumergroup", "g"), ("partition", "0"), ("topic", "a")))] == 4
    assert any(name == "process_resident_memory_bytes" for name, _ in got)


def test_render_openmetrics_when_asked():
    reg = MetricsRegistry()
    reg.meter("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec").mark()
    body, ctype = render(reg, "application/openmetrics-text; version=1.0.0")
    assert ctype.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_parse_prometheus_listener():
    assert parse_prometheus_listener("http://127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_prometheus_listener("http://:0") == ("", 0)
    assert parse_prometheus_listener("http://0.0.0.0:9404/") == ("0.0.0.0", 9404)
    for bad in ("127.0.0.1:9404", "https://h:1", "http://h", "http://h:99999", "http://h:1/x"):
        with pytest.raises(ConfigError) as e:
            parse_prometheus_listener(bad)
        assert e.value.key == "prometheus.listener"


def _request(api_key, version, body=None) -> Request:
    r = Request("c-1", 0, 1_000_000, api_key, version, 7, memoryview(bytearray(100)),
                "PLAINTEXT", ("127.0.0.1", 1))
    r.dequeue_ns, r.local_ns, r.response_ns = 1_500_000, 3_500_000, 13_500_000
    r.send_start_ns = 14_000_000
    r.body = body
    return r


def test_request_recorder_timings_and_fetch_split():
    reg = MetricsRegistry()
    rec = RequestMetricsRecorder(reg)
    rec.record(_request(0, 9), 15_000_000)

    class FetchBody:
        replica_id = 2
        replica_state = None

    rec.record(_request(1, 12, FetchBody()), 15_000_000)
    base = "kafka.network:type=RequestMetrics,name={},request={}"
    expect = {"RequestQueueTimeMs": 0.5, "LocalTimeMs": 2.0, "RemoteTimeMs": 10.0,
              "ResponseQueueTimeMs": 0.5, "ResponseSendTimeMs": 1.0, "TotalTimeMs": 14.0}
    for name, ms in expect.items():
        for req in ("Produce", "Fetch", "FetchFollower"):
            h = reg.histograms[base.format(name, req)]
            assert h.count == 1 and h.sum == pytest.approx(ms)
    assert base.format("TotalTimeMs", "FetchConsumer") not in reg.histograms
    assert reg.meters[base.format("RequestsPerSec", "Produce") + ",version=9"].count == 1
    assert reg.histograms[base.format("RequestBytes", "Produce")].sum == 100
    assert request_name(18) == "ApiVersions"


def test_topic_stats_produce_and_fetch():
    reg = MetricsRegistry()
    stats = BrokerTopicStats(reg)
    ok = ProducePartitionResult(ErrorCode.NONE, 10, 14, -1, 0)
    big = ProducePartitionResult(ErrorCode.MESSAGE_TOO_LARGE)
    moved = ProducePartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    stats.record_produce({("a", 0): b"x" * 50, ("a", 1): b"y" * 70, ("b", 0): b"z" * 9},
                         {("a", 0): ok, ("a", 1): big, ("b", 0): moved})
    m = reg.meters
    base = "kafka.server:type=BrokerTopicMetrics,name="
    assert m[base + "MessagesInPerSec,topic=a"].count == 5
    assert m[base + "BytesInPerSec,topic=a"].count == 50
    assert m[base + "BytesRejectedPerSec,topic=a"].count == 70
    assert m[base + "FailedProduceRequestsPerSec,topic=a"].count == 1
    assert m[base + "FailedProduceRequestsPerSec,topic=b"].count == 0  # expected error
    assert m[base + "TotalProduceRequestsPerSec"].count == 3

    class Data:
        def __init__(self, error, records):
            self.error, self.records = error, records

    stats.record_fetch({("a", 0): Data(0, b"r" * 40), ("b", 0): Data(0, b"")}, follower=False)
    stats.record_fetch({("a", 0): Data(0, b"r" * 8)}, follower=True)
    assert m[base + "BytesOutPerSec,topic=a"].count == 40
    assert m[base + "ReplicationBytesOutPerSec"].count == 8
    assert m[base + "TotalFetchRequestsPerSec"].count == 3
    stats.retain({"a"})
    assert base + "BytesInPerSec,topic=b" not in m and base + "BytesInPerSec,topic=a" in m
