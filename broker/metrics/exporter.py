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


class _Fam:
    __slots__ = ("name", "type", "help", "samples")

    def __init__(self, name: str, typ: str, help_text: str) -> None:
        self.name, self.type, self.help = name, typ, help_text
        self.samples: list[tuple[str, tuple, float]] = []  # (sample name, labels, value)


def _families(snap: Snapshot) -> list[_Fam]:
    """Families (name, type, help, samples) from a snapshot (runs in the render thread)."""
    fams: dict[str, _Fam] = {}

    def family(name: str, typ: str, mbean: str) -> _Fam:
        f = fams.get(name)
        if f is None:
            f = fams[name] = _Fam(name, typ, f"Kafka MBean {_help(mbean)}")
        return f

    for mbean, count in snap.meters:
        c = convert(mbean, "Count")
        if c is None:
            continue
        if c.type == "counter" and c.name.endswith("_total"):
            family(c.name[:-6], "counter", mbean).samples.append((c.name, c.labels, count))
        else:
            family(c.name, "unknown", mbean).samples.append((c.name, c.labels, count))
    for mbean, value in snap.gauges:
        c = convert(mbean, "Value")
        if c is not None:
            family(c.name, "gauge", mbean).samples.append((c.name, c.labels, value))
    qs = [q for _, q in QUANTILES]
    for mbean, window, count, total, scale in snap.histograms:
        c = convert(mbean, "Count")
        q0 = convert(mbean, QUANTILES[0][0])
        if c is None or q0 is None:
            continue
        values = quantiles(window, scale, qs)
        summary = c.name == q0.name + "_count"
        f = family(q0.name, "summary" if summary else "unknown", mbean)
        for (attr, _), v in zip(QUANTILES, values, strict=True):
            q = convert(mbean, attr)
            if q is not None:
                f.samples.append((q.name, q.labels, v))
        if summary:
            f.samples.append((c.name, c.labels, count))
            f.samples.append((q0.name + "_sum", c.labels, total))
        else:
            family(c.name, "unknown", mbean).samples.append((c.name, c.labels, count))
    for nf in snap.native:
        f = fams.get(nf.name)
        if f is None:
            base = nf.name[:-6] if nf.type == "counter" and nf.name.endswith("_total") \
                else nf.name
            f = fams[nf.name] = _Fam(base, nf.type, nf.help)
        for labels, value in nf.samples:
            f.samples.append((nf.name, tuple(labels.items()), value))
    return list(fams.values())


def _metrics(fams: list[_Fam]):
    """prometheus_client Metric objects (the OpenMetrics path)."""
    from prometheus_client.core import Metric

    out = []
    for f in fams:
        m = Metric(f.name, f.help, f.type)
        for name, labels, value in f.samples:
            m.add_sample(name, dict(labels), value)
        out.append(m)
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(float(v))


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
    """Formats a snapshot (one render at a time). Text format 0.0.4 is written directly, with
    each sample's ``name{labels}`` prefix cached across scrapes (only values change), then
    prometheus_client's process/platform/GC collectors; OpenMetrics goes through
    prometheus_client entirely."""

    _PREFIX_CACHE_MAX = 1_000_000

    def __init__(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            GCCollector,
            PlatformCollector,
            ProcessCollector,
        )

        self.process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.process)
        PlatformCollector(registry=self.process)
        GCCollector(registry=self.process)
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = _Collector()
        self.registry.register(self.collector)
        self.registry.register(_Chain(self.process))
        self._prefix: dict[tuple[str, tuple], str] = {}

    def _text(self, fams: list[_Fam]) -> bytes:
        from prometheus_client.exposition import generate_latest

        prefix = self._prefix
        if len(prefix) > self._PREFIX_CACHE_MAX:
            prefix.clear()
        out: list[str] = []
        for f in fams:
            name = f.name + "_total" if f.type == "counter" else f.name
            typ = "untyped" if f.type == "unknown" else f.type
            out.append(f"# HELP {name} {f.help}\n# TYPE {name} {typ}\n")
            for sname, labels, value in f.samples:
                key = (sname, labels)
                p = prefix.get(key)
                if p is None:
                    if labels:
                        inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels))
                        p = f"{sname}{{{inner}}} "
                    else:
                        p = sname + " "
                    prefix[key] = p
                out.append(p + _number(value) + "\n")
        return "".join(out).encode() + generate_latest(self.process)

    def render(self, snap: Snapshot, accept: str | None) -> tuple[bytes, str]:
        from prometheus_client.exposition import choose_encoder

        fams = _families(snap)
        encoder, content_type = choose_encoder(accept or "")
        if content_type.startswith("text/plain"):
            return self._text(fams), "text/plain; version=0.0.4; charset=utf-8"
        self.collector.families = _metrics(fams)
        try:
            return encoder(self.collector_registry()), content_type
        finally:
            self.collector.families = []

    def collector_registry(self):
        return self.registry


class _Chain:
    """Collects another registry's collectors (the process families) inside ours."""

    def __init__(self, registry) -> None:
        self.inner = registry

    def collect(self):
        return self.inner.collect()


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
