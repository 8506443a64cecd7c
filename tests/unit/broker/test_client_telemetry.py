"""KIP-714 pushed client metrics on /metrics (broker.metrics.client_telemetry): name
conversion, labels, rendering through the exporter, and the registry dropping a client's
series when it terminates or expires (manual clock)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from broker.client_metrics import ClientMetricsRegistry, PushedMetric
from broker.metrics.client_telemetry import (
    families,
    prometheus_name,
    register_client_telemetry,
    unregister_client_telemetry,
)
from broker.metrics.core import MetricsRegistry
from broker.metrics.exporter import render

LATENCY = "org.apache.kafka.producer.node.request.latency.avg"


def test_prometheus_name():
    assert prometheus_name(LATENCY) == \
        "kafka_client_org_apache_kafka_producer_node_request_latency_avg"
    assert prometheus_name("a..b-c/d") == "kafka_client_a_b_c_d"
    assert prometheus_name("kafka.client:x") == "kafka_client_kafka_client_x"


def test_families_labels_and_newest_point():
    pushed = [
        PushedMetric("iid-1", "app", LATENCY, 1.5, 10, (("node.id", "0"),)),
        PushedMetric("iid-1", "app", LATENCY, 2.5, 20, (("node.id", "0"),)),
        PushedMetric("iid-2", "", LATENCY, 7.0, 10, (("client_id", "spoof"), ("9x", "y"))),
    ]
    [fam] = families(pushed)
    assert fam.name == "kafka_client_org_apache_kafka_producer_node_request_latency_avg"
    assert fam.type == "gauge" and LATENCY in fam.help
    assert sorted(fam.samples, key=lambda s: s[0]["client_instance_id"]) == [
        ({"client_instance_id": "iid-1", "client_id": "app", "node_id": "0"}, 2.5),
        ({"client_instance_id": "iid-2", "_9x": "y"}, 7.0)]


def _scrape(metrics: MetricsRegistry, accept: str | None = None) -> dict:
    body, _ = render(metrics, accept)
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def test_rendered_and_dropped_on_terminate_and_expiry():
    now = [1000.0]
    clients = ClientMetricsRegistry(clock=lambda: now[0])
    services = SimpleNamespace(client_metrics=None)
    metrics = MetricsRegistry()
    register_client_telemetry(metrics, services)
    assert not any(n.startswith("kafka_client_") for n in _scrape(metrics))
    services.client_metrics = SimpleNamespace(registry=clients)
    clients.record("iid-a", "a", 10, [PushedMetric("iid-a", "a", LATENCY, 3.0, 1)],
                   interval_ms=1000)
    clients.record("iid-b", "b", 10, [PushedMetric("iid-b", "b", LATENCY, 4.0, 1)],
                   interval_ms=100_000)
    fam = _scrape(metrics)["kafka_client_org_apache_kafka_producer_node_request_latency_avg"]
    assert fam.type == "gauge"
    assert {(s.labels["client_instance_id"], s.labels["client_id"], s.value)
            for s in fam.samples} == {("iid-a", "a", 3.0), ("iid-b", "b", 4.0)}
    body, _ = render(metrics, "application/openmetrics-text; version=1.0.0")
    assert b'kafka_client_org_apache_kafka_producer_node_request_latency_avg{' \
           b'client_id="a",client_instance_id="iid-a"} 3.0' in body
    # a terminating push ends the client's series
    clients.record("iid-a", "a", 10, [PushedMetric("iid-a", "a", LATENCY, 5.0, 2)],
                   terminating=True, interval_ms=1000)
    fam = _scrape(metrics)["kafka_client_org_apache_kafka_producer_node_request_latency_avg"]
    assert [s.labels["client_instance_id"] for s in fam.samples] == ["iid-b"]
    # no push for max(60 s, 3 x 100 s) -> expired
    now[0] += 299
    assert clients.snapshot()
    now[0] += 2
    assert clients.snapshot() == [] and "iid-b" not in clients.clients()
    assert not any(n.startswith("kafka_client_") for n in _scrape(metrics))
    unregister_client_telemetry(metrics)
    assert not metrics.deferred_providers


def test_failing_conversion_does_not_fail_the_scrape():
    metrics = MetricsRegistry()
    metrics.deferred_provider("bad", lambda: [object()], families)
    metrics.gauge("kafka.server:type=ReplicaManager,name=LeaderCount", lambda: 2)
    assert "kafka_server_replicamanager_leadercount" in _scrape(metrics)
