"""KIP-714 pushed client metrics on the broker's Prometheus endpoint.

Each OTLP metric name a client pushed becomes one gauge family named
``kafka_client_`` + the name with every character outside ``[a-zA-Z0-9_]`` replaced by ``_``
(runs collapsed), as OpenTelemetry's Prometheus exporter sanitizes names:
``org.apache.kafka.producer.node.request.latency.avg`` ->
``kafka_client_org_apache_kafka_producer_node_request_latency_avg``. Labels:
``client_instance_id``, ``client_id`` (when the client sent one) and the data point's OTLP
attributes (names sanitized the same way; one that clashes with ours is dropped). The value
is the last pushed data point (sums as their cumulative value, histograms/summaries as their
point count). Series exist while the client is live in
``broker.client_metrics.ClientMetricsRegistry`` (no longer after a terminating push or
max(60 s, 3 x push interval) without one).

The registry snapshot (a list copy under its lock) is taken on the event loop; names and
labels are built in the exporter's render thread (``MetricsRegistry.deferred_provider``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from broker.metrics.core import MetricsRegistry, NativeFamily

__all__ = ["PREFIX", "families", "prometheus_name", "register_client_telemetry",
           "unregister_client_telemetry"]

PREFIX = "kafka_client_"
_KEY = "kip714.client_metrics"
_ILLEGAL = re.compile(r"[^a-zA-Z0-9_]+")
_OWN_LABELS = ("client_instance_id", "client_id")


def prometheus_name(otlp_name: str) -> str:
    """``org.apache.kafka.producer.node.request.latency.avg`` ->
    ``kafka_client_org_apache_kafka_producer_node_request_latency_avg``."""
    return PREFIX + _ILLEGAL.sub("_", otlp_name).strip("_")


def _label_name(key: str) -> str | None:
    name = _ILLEGAL.sub("_", key).strip("_")
    if not name:
        return None
    if name[0].isdigit():
        name = "_" + name
    return None if name in _OWN_LABELS else name


def families(pushed: Iterable) -> list[NativeFamily]:
    """Gauge families from ``[PushedMetric]`` (see the module docstring); a series pushed
    twice under names that sanitize alike keeps the newest data point."""
    fams: dict[str, tuple[str, dict]] = {}  # name -> (help, {labels tuple: (ts, value)})
    for m in pushed:
        name = prometheus_name(m.name)
        if name == PREFIX:
            continue
        entry = fams.get(name)
        if entry is None:
            entry = fams[name] = (f"KIP-714 client metric {m.name}", {})
        labels = {"client_instance_id": m.client_instance_id}
        if m.client_id:
            labels["client_id"] = m.client_id
        for k, v in m.attributes:
            ln = _label_name(k)
            if ln is not None and ln not in labels:
                labels[ln] = v
        key = tuple(sorted(labels.items()))
        old = entry[1].get(key)
        if old is None or m.timestamp_ms >= old[0]:
            entry[1][key] = (m.timestamp_ms, m.value)
    return [NativeFamily(name, "gauge", help_text,
                         [(dict(k), v) for k, (_, v) in series.items()])
            for name, (help_text, series) in fams.items()]


def register_client_telemetry(registry: MetricsRegistry, services) -> None:
    """Export ``services.client_metrics.registry`` (read at scrape time: it may be set after
    the metrics start)."""

    def fetch() -> list:
        manager = getattr(services, "client_metrics", None)
        return manager.registry.snapshot() if manager is not None else []

    registry.deferred_provider(_KEY, fetch, families)


def unregister_client_telemetry(registry: MetricsRegistry) -> None:
    registry.remove(_KEY)
