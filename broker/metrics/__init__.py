"""Broker metrics: Kafka's MBeans kept as plain counters, exported to Prometheus on scrape.

One line registers or updates a metric (names are Kafka's MBean names; see
``docs/INTERFACES.md`` and ``broker/metrics/jmx_rules.py`` for the Prometheus names)::

    from broker import metrics
    ISR_SHRINKS = metrics.meter("kafka.server:type=ReplicaManager,name=IsrShrinksPerSec")
    ISR_SHRINKS.mark()                                   # an event
    metrics.histogram("kafka.controller:type=ControllerStats,"
                      "name=LeaderElectionRateAndTimeMs").update(12.5)   # a duration in ms
    metrics.gauge("kafka.controller:type=KafkaController,name=ActiveControllerCount",
                  lambda: 1 if me.is_active else 0)      # read at scrape time

``meter``/``histogram`` return the same object for the same name (keep it in a module global
or call inline). ``REGISTRY`` is the process-wide registry (one broker per process, as Kafka's
default Yammer registry); tests that build several brokers in one process call
``REGISTRY.remove_matching(prefix)`` or ``REGISTRY.clear()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker.metrics.core import (
    Gauge,
    Histogram,
    Meter,
    MetricsRegistry,
    NativeFamily,
    mbean_name,
)

__all__ = ["REGISTRY", "TOPIC_STATS", "Gauge", "Histogram", "Meter", "MetricsRegistry", "NativeFamily",
           "gauge", "gauge_provider", "histogram", "mbean_name", "meter", "native_provider",
           "remove"]

REGISTRY = MetricsRegistry()

from broker.metrics.topic_stats import BrokerTopicStats  # noqa: E402  (uses REGISTRY's types)

#: BrokerTopicMetrics (the Produce and Fetch handlers record into it)
TOPIC_STATS = BrokerTopicStats(REGISTRY)


def meter(mbean: str) -> Meter:
    """The Meter named ``mbean`` (created on first use)."""
    return REGISTRY.meter(mbean)


def histogram(mbean: str, resolution: float = 1000.0) -> Histogram:
    """The Histogram/Timer named ``mbean`` (values in its unit, ms for ``...Ms``)."""
    return REGISTRY.histogram(mbean, resolution)


def gauge(mbean: str, fn: Callable[[], float]) -> Gauge:
    """Register ``fn`` as the Gauge ``mbean`` (replacing an earlier one)."""
    return REGISTRY.gauge(mbean, fn)


def gauge_provider(key: str, fn: Callable[[], Iterable[tuple[str, float]]]) -> None:
    """``fn()`` yields ``(mbean, value)`` gauge samples at scrape time (many at once)."""
    REGISTRY.gauge_provider(key, fn)


def native_provider(key: str, fn: Callable[[], Iterable[NativeFamily]]) -> None:
    """``fn()`` yields Prometheus families named directly (not from MBeans)."""
    REGISTRY.native_provider(key, fn)


def remove(mbean: str) -> None:
    REGISTRY.remove(mbean)
