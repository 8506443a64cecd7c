"""Start and stop the broker's metrics: the request-metrics hook on the SocketServer, the
LogFlushStats observer, the broker gauges, KIP-714 pushed client metrics, the event-loop
monitor and, when ``prometheus.listener`` is set, the Prometheus endpoint."""

from __future__ import annotations

import logging

from broker.metrics import REGISTRY, TOPIC_STATS
from broker.metrics.broker_gauges import register_broker_gauges, unregister_broker_gauges
from broker.metrics.client_telemetry import (
    register_client_telemetry,
    unregister_client_telemetry,
)
from broker.metrics.exporter import CONFIG_KEY, PrometheusExporter, parse_prometheus_listener
from broker.metrics.loop_monitor import LoopMonitor
from broker.metrics.request_metrics import RequestMetricsRecorder

__all__ = ["BrokerMetrics"]

log = logging.getLogger(__name__)


class BrokerMetrics:
    """``BrokerMetrics(config)`` checks ``prometheus.listener`` (ConfigError); ``await
    start(services, socket_server)``; ``await stop()``. ``exporter`` is the running
    PrometheusExporter or None; ``recorder`` the RequestMetrics recorder."""

    def __init__(self, config, registry=REGISTRY) -> None:
        self.registry = registry
        value = config.get(CONFIG_KEY) if config is not None else None
        self.listener = parse_prometheus_listener(value) if value else None
        self.recorder = RequestMetricsRecorder(registry)
        self.loop_monitor = LoopMonitor()
        self.exporter: PrometheusExporter | None = None
        self._socket_server = None

    async def start(self, services, socket_server) -> None:
        from broker.oplogs import attach_request_log

        attach_request_log(self.recorder)
        self._socket_server = socket_server
        socket_server.request_completed = self.recorder.record
        if services.log_manager is not None:
            services.log_manager.flush_observer = self.registry.histogram(
                "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs").update
        self.loop_monitor.start()
        register_broker_gauges(self.registry, services, socket_server, self.loop_monitor,
                               TOPIC_STATS)
        register_client_telemetry(self.registry, services)  # KIP-714 pushed metrics
        if self.listener is not None:
            exporter = PrometheusExporter(self.registry, *self.listener)
            await exporter.start()
            self.exporter = exporter

    async def stop(self) -> None:
        if self.exporter is not None:
            await self.exporter.stop()
            self.exporter = None
        if self._socket_server is not None:
            self._socket_server.request_completed = None
        unregister_broker_gauges(self.registry)
        unregister_client_telemetry(self.registry)
        await self.loop_monitor.stop()
