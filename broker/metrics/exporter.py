"""The Prometheus endpoint: ``prometheus.listener=http://HOST:PORT`` serves ``GET /metrics``.

A scrape copies the registry's numbers on the event loop (:meth:`MetricsRegistry.snapshot`,
plain reads), then a worker thread turns MBean names into Prometheus names
(:mod:`broker.metrics.jmx_rules`), computes quantiles and formats the text with
``prometheus_client`` (text format 0.0.4, or OpenMetrics when the scraper asks for it), so the
loop is busy only for the copy. One scrape is rendered at a time. The process families
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``process_open_fds``, ...)
come from ``prometheus_client``'s process collector, as the JMX exporter reports them for a
JVM. Served with aiohttp on the broker's loop; ``GET /`` links to ``/metrics``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from urllib.parse import urlsplit

from broker.metrics.core import QUANTILES, MetricsRegistry, Snapshot, quantiles
from broker.metrics.jmx_rules import convert

__all__ = ["PrometheusExporter", "parse_prometheus_listener", "render"]

log = logging.getLogger(__name__)

CONFIG_KEY = "prometheus.listener"


def parse_prometheus_listener(value: str) -> tuple[str, int]:
    """``http://HOST:PORT`` -> (host, port); empty host = all interfaces; port 0 = any free
    port. ConfigError naming ``prometheus.listener`` otherwise."""
    from broker.config import ConfigError

    allowed = "http://HOST:PORT (for example http://0.0.0.0:9404)"
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError as e:
        raise ConfigError(CONFIG_KEY, value, allowed, str(e)) from None
    if parts.scheme != "http" or port is None or parts.path not in ("", "/") \
            or parts.query or parts.username:
        raise ConfigError(CONFIG_KEY, value, allowed)
    return parts.hostname or "", port


def _families(snap: Snapshot):
    """prometheus_client Metric families from a snapshot (runs in the render thread)."""
    from prometheus_client.core import Metric

    fams: dict[str, Metric] = {}

    def family(name: str, typ: str, mbean: str) -> Metric:
        f = fams.get(name)
        if f is None:
            f = fams[name] = Metric(name, f"Kafka MBean {_help(mbean)}", typ)
        return f

    for mbean, count in snap.meters:
        c = convert(mbean, "Count")
        if c is None:
            continue
        if c.type == "counter" and c.name.endswith("_total"):
            family(c.name[:-6], "counter", mbean).add_sample(c.name, dict(c.labels), count)
        else:
            family(c.name, "unknown", mbean).add_sample(c.name, dict(c.labels), count)
    for mbean, value in snap.gauges:
        c = convert(mbean, "Value")
        if c is not None:
            family(c.name, "gauge", mbean).add_sample(c.name, dict(c.labels), value)
    for mbean, window, count, total, scale in snap.histograms:
        c = convert(mbean, "Count")
        q0 = convert(mbean, QUANTILES[0][0])
        if c is None or q0 is None:
            continue
        values = quantiles(window, scale, [q for _, q in QUANTILES])
        summary = c.name == q0.name + "_count"
        f = family(q0.name, "summary" if summary else "unknown", mbean)
        for (attr, _), v in zip(QUANTILES, values, strict=True):
            q = convert(mbean, attr)
            if q is not None:
                f.add_sample(q.name, dict(q.labels), v)
        if summary:
            f.add_sample(c.name, dict(c.labels), count)
            f.add_sample(q0.name + "_sum", dict(c.labels), total)
        else:
            family(c.name, "unknown", mbean).add_sample(c.name, dict(c.labels), count)
    for nf in snap.native:
        f = fams.get(nf.name)
        if f is None:
            base = nf.name[:-6] if nf.type == "counter" and nf.name.endswith("_total") \
                else nf.name
            f = fams[nf.name] = Metric(base, nf.help, nf.type)
        for labels, value in nf.samples:
            f.add_sample(nf.name, labels, value)
    return list(fams.values())


def _help(mbean: str) -> str:
    domain, _, props = mbean.partition(":")
    keep = [p for p in props.split(",") if p.split("=", 1)[0] in ("type", "name")]
    return f"{domain}:{','.join(keep)}"


class _Collector:
    def __init__(self) -> None:
        self.families: list = []

    def collect(self):
        return iter(self.families)


class _Renderer:
    """The prometheus_client registry a render uses (one render at a time)."""

    def __init__(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            GCCollector,
            PlatformCollector,
            ProcessCollector,
        )

        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = _Collector()
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def render(self, snap: Snapshot, accept: str | None) -> tuple[bytes, str]:
        from prometheus_client.exposition import choose_encoder

        self.collector.families = _families(snap)
        try:
            encoder, content_type = choose_encoder(accept or "")
            return encoder(self.registry), content_type
        finally:
            self.collector.families = []


def render(registry: MetricsRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """Snapshot and render in the calling thread (tests and tools)."""
    return _Renderer().render(registry.snapshot(), accept)


class PrometheusExporter:
    """``await start()`` binds ``http://host:port/metrics``; ``port`` is the bound port;
    ``await stop()``. OSError from the bind propagates (the server turns it into a fatal
    startup error naming the key)."""

    def __init__(self, registry: MetricsRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.scrapes = 0
        self._runner = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prometheus")
        self._renderer: _Renderer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/", self._index)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host or None, self.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []  # aiohttp keeps the server here
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host or "0.0.0.0", self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _index(self, request):
        from aiohttp import web

        return web.Response(text='<html><body><a href="/metrics">Metrics</a></body></html>',
                            content_type="text/html")

    async def _metrics(self, request):
        from aiohttp import web

        loop = asyncio.get_running_loop()
        async with self._lock:
            snap = self.registry.snapshot()
            for e in snap.errors:
                log.warning("metrics: %s", e)
            if self._renderer is None:
                self._renderer = await loop.run_in_executor(self._pool, _Renderer)
            body, content_type = await loop.run_in_executor(
                self._pool, self._renderer.render, snap, request.headers.get("Accept"))
        self.scrapes += 1
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp
