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
    from common.config_error import ConfigError

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


def _native(snap: Snapshot) -> list:
    """The snapshot's native families plus its deferred providers' (converted here, in the
    render thread); a failing conversion is logged and skipped."""
    out = list(snap.native)
    for key, to_families, data in snap.deferred:
        try:
            out.extend(to_families(data))
        except Exception:  # noqa: BLE001 - one broken provider must not fail a scrape
            log.warning("metrics: %s failed", key, exc_info=True)
    return out


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
    for mbean, window, count, total, scale, _ in snap.histograms:
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
    for nf in _native(snap):
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


def _number(v) -> str:
    if type(v) is int:
        return str(v)
    v = float(v)
    if v != v:
        return "NaN"
    if v == _INF:
        return "+Inf"
    if v == -_INF:
        return "-Inf"
    return repr(v)


_INF = float("inf")


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
        self._plans: dict[tuple[str, str], object] = {}
        self._headers: dict[str, str] = {}
        self._quantiles: dict[str, tuple] = {}

    # ----- text format 0.0.4: per-MBean plans (family, line prefixes) computed once --------
    def _family_header(self, name: str, typ: str, mbean: str | None, help_text: str = ""):
        headers = self._headers
        if name not in headers:
            shown = name + "_total" if typ == "counter" else name
            text = help_text or f"Kafka MBean {_help(mbean or '')}"
            headers[name] = (f"# HELP {shown} {text}\n"
                             f"# TYPE {shown} {'untyped' if typ == 'unknown' else typ}\n")
        return name

    def _line(self, sname: str, labels) -> str:
        key = (sname, tuple(labels))
        p = self._prefix.get(key)
        if p is None:
            if labels:
                inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels))
                p = f"{sname}{{{inner}}} "
            else:
                p = sname + " "
            self._prefix[key] = p
        return p

    def _plan_value(self, mbean: str, attribute: str, kind: str):
        c = convert(mbean, attribute)
        if c is None:
            return False
        if kind == "meter" and c.type == "counter" and c.name.endswith("_total"):
            fam = self._family_header(c.name[:-6], "counter", mbean)
        else:
            fam = self._family_header(c.name, "gauge" if kind == "gauge" else "unknown", mbean)
        return fam, self._line(c.name, c.labels)

    def _plan_histogram(self, mbean: str):
        c = convert(mbean, "Count")
        q0 = convert(mbean, QUANTILES[0][0])
        if c is None or q0 is None:
            return False
        summary = c.name == q0.name + "_count"
        fam = self._family_header(q0.name, "summary" if summary else "unknown", mbean)
        qlines = []
        for attr, _ in QUANTILES:
            q = convert(mbean, attr)
            qlines.append(self._line(q.name, q.labels) if q is not None else None)
        if summary:
            return fam, qlines, fam, self._line(c.name, c.labels), \
                self._line(q0.name + "_sum", c.labels)
        cfam = self._family_header(c.name, "unknown", mbean)
        return fam, qlines, cfam, self._line(c.name, c.labels), None

    def _text(self, snap: Snapshot) -> bytes:
        if len(self._prefix) > self._PREFIX_CACHE_MAX:
            self._prefix.clear()
            self._plans.clear()
            self._quantiles.clear()
        plans = self._plans
        groups: dict[str, list[str]] = {}
        for kind, items in (("meter", snap.meters), ("gauge", snap.gauges)):
            attribute = "Count" if kind == "meter" else "Value"
            for mbean, value in items:
                plan = plans.get((kind, mbean))
                if plan is None:
                    plan = plans[(kind, mbean)] = self._plan_value(mbean, attribute, kind)
                if plan is False:
                    continue
                lines = groups.get(plan[0])
                if lines is None:
                    lines = groups[plan[0]] = []
                lines.append(plan[1] + _number(value))
        qs = [q for _, q in QUANTILES]
        qcache = self._quantiles
        for mbean, window, count, total, scale, key in snap.histograms:
            plan = plans.get(("hist", mbean))
            if plan is None:
                plan = plans[("hist", mbean)] = self._plan_histogram(mbean)
            if plan is False:
                continue
            fam, qlines, cfam, cline, sline = plan
            lines = groups.setdefault(fam, [])
            cached = qcache.get(mbean)
            if cached is None or cached[0] != key:
                cached = qcache[mbean] = (key, quantiles(window, scale, qs))
            for line, v in zip(qlines, cached[1], strict=True):
                if line is not None:
                    lines.append(line + _number(v))
            clines = groups.setdefault(cfam, [])
            clines.append(cline + _number(count))
            if sline is not None:
                clines.append(sline + _number(total))
        for nf in _native(snap):
            base = nf.name[:-6] if nf.type == "counter" and nf.name.endswith("_total") \
                else nf.name
            fam = self._family_header(base, nf.type, None, nf.help)
            lines = groups.setdefault(fam, [])
            for labels, value in nf.samples:
                lines.append(self._line(nf.name, tuple(labels.items())) + _number(value))
        for m in self.process.collect():  # process_*, python_* (prometheus_client)
            name, typ = (m.name + "_info", "gauge") if m.type == "info" else (m.name, m.type)
            fam = self._family_header(name, typ, None, m.documentation)
            lines = groups.setdefault(fam, [])
            for sample in m.samples:
                lines.append(self._line(sample.name, tuple(sample.labels.items()))
                             + _number(sample.value))
        out = []
        headers = self._headers
        for fam, lines in groups.items():
            out.append(headers[fam])
            out.append("\n".join(lines))
            out.append("\n")
        return "".join(out).encode()

    def render(self, snap: Snapshot, accept: str | None) -> tuple[bytes, str]:
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        if content_type.startswith("text/plain"):
            return self._text(snap), "text/plain; version=0.0.4; charset=utf-8"
        self.collector.families = _metrics(_families(snap))
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
