"""The web console: aiohttp routes rendering Jinja2 templates (HTML autoescaped: every name,
key, value and header from the cluster is shown as text), static assets from the package (no
CDN), JSON for the live charts.

Pages: ``/`` (cluster: brokers, controller, counts, throughput chart), ``/brokers/{id}``
(a broker: endpoint, rack, log dirs, configs, its metrics charts), ``/topics`` (list, create),
``/topics/{name}`` (partitions with leader/replicas/ISR/offsets/sizes, configs, throughput
chart, delete), ``/topics/{name}/messages`` (browser: partition, offset or timestamp, text/
JSON/hex), ``/groups`` and ``/groups/{id}`` (members, assignments, committed offsets, lag,
lag chart); ``/api/series?name=...`` (chart data), ``/healthz``.

Writes (create/delete topic) are POST forms, refused with 403 unless the console was started
with ``--allow-writes``, and only from the console's own pages (the ``Origin``/``Referer``
must match the host). When the cluster cannot be reached every page shows a banner saying
so (HTTP 503) instead of failing.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import string
from pathlib import Path

import jinja2
from aiohttp import web

from client.connection import ToolError
from console.sampler import Sampler
from console.service import ClusterService, ClusterUnavailable

__all__ = ["make_app", "format_value"]

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SERVICE = web.AppKey("service", ClusterService)
SAMPLER = web.AppKey("sampler", Sampler)
SETTINGS = web.AppKey("settings", dict)
ENV = web.AppKey("env", jinja2.Environment)
FORMATS = ("text", "json", "hex")
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PRINTABLE = set(string.printable) - set("\x0b\x0c")


def format_value(data: bytes | None, fmt: str) -> str:
    """Bytes as text (UTF-8, undecodable bytes as \\xNN), pretty JSON (falls back to text) or
    a hex dump; ``None`` as ``null``. Plain text: the template escapes it."""
    if data is None:
        return "null"
    if fmt == "hex":
        lines = []
        for i in range(0, len(data), 16):
            chunk = data[i:i + 16]
            hexes = " ".join(f"{b:02x}" for b in chunk)
            text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
            lines.append(f"{i:08x}  {hexes:<47}  {text}")
        return "\n".join(lines)
    text = data.decode("utf-8", errors="backslashreplace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return "".join(c if c in _PRINTABLE or ord(c) > 127 else f"\\x{ord(c):02x}" for c in text)


def _size(n) -> str:
    if n is None or n < 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["size"] = _size
    env.filters["value"] = format_value
    return env


async def _render(request: web.Request, template: str, status: int = 200, **ctx) -> web.Response:
    app = request.app
    sampler = app[SAMPLER]
    ctx.setdefault("banner", None)
    ctx.setdefault("title", "Josef")
    if ctx["banner"] is None and sampler.last_error and sampler.last_ok is None:
        ctx["banner"] = sampler.last_error
    html = app[ENV].get_template(template).render(
        settings=app[SETTINGS], path=request.path, **ctx)
    return web.Response(text=html, content_type="text/html", status=status)


async def _unavailable(request: web.Request, e: Exception) -> web.Response:
    return await _render(request, "unavailable.html", status=503, banner=str(e))


def _page(template: str):
    """Decorator: a handler returning a context dict, rendered into ``template``; an
    unreachable cluster becomes the banner page, a cluster error an error message."""

    def wrap(fn):
        async def handler(request: web.Request) -> web.Response:
            try:
                ctx = await fn(request)
            except ClusterUnavailable as e:
                return await _unavailable(request, e)
            except ToolError as e:
                return await _render(request, "error.html", status=502, error=str(e))
            except web.HTTPException:
                raise
            except Exception as e:  # noqa: BLE001 - a page never shows a traceback
                log.exception("page %s failed", request.path)
                return await _render(request, "error.html", status=500,
                                     error=f"internal error: {e!r}")
            if isinstance(ctx, web.StreamResponse):
                return ctx
            return await _render(request, template, **ctx)

        return handler

    return wrap


@_page("overview.html")
async def overview(request):
    cluster = await request.app[SERVICE].cluster()
    return {"cluster": cluster, "title": "Cluster"}


@_page("broker.html")
async def broker(request):
    try:
        broker_id = int(request.match_info["id"])
    except ValueError:
        raise web.HTTPNotFound() from None
    b = await request.app[SERVICE].broker(broker_id)
    if b is None:
        return await _render(request, "error.html", status=404,
                             error=f"Broker {broker_id} is not in the cluster")
    has_metrics = broker_id in request.app[SAMPLER].metrics_urls
    return {"broker": b, "has_metrics": has_metrics, "title": f"Broker {broker_id}"}


@_page("topics.html")
async def topics(request):
    show_internal = request.query.get("internal") == "1"
    items = await request.app[SERVICE].topics()
    if not show_internal:
        items = [t for t in items if not t["internal"]]
    return {"topics": items, "show_internal": show_internal, "title": "Topics",
            "message": request.query.get("message")}


@_page("topic.html")
async def topic(request):
    name = request.match_info["name"]
    t = await request.app[SERVICE].topic(name)
    if t is None:
        return await _render(request, "error.html", status=404,
                             error=f"Topic {name} does not exist")
    return {"topic": t, "title": f"Topic {name}", "message": request.query.get("message")}


def _int(query, key: str, default=None, low: int | None = None, high: int | None = None):
    raw = query.get(key, "").strip()
    if not raw:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{key} must be an integer") from None
    if low is not None:
        v = max(low, v)
    if high is not None:
        v = min(high, v)
    return v


def _timestamp(raw: str) -> int | None:
    raw = raw.strip()
    if not raw:
        return None
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        dt = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise web.HTTPBadRequest(
            text="timestamp must be milliseconds or an ISO 8601 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return int(dt.timestamp() * 1000)


@_page("messages.html")
async def messages(request):
    name = request.match_info["name"]
    q = request.query
    fmt = q.get("format", "text")
    if fmt not in FORMATS:
        fmt = "text"
    partition = _int(q, "partition", 0, low=0)
    limit = _int(q, "limit", 50, low=1, high=500)
    offset = _int(q, "offset")
    ts = _timestamp(q.get("timestamp", ""))
    t = await request.app[SERVICE].topic(name)
    if t is None:
        return await _render(request, "error.html", status=404,
                             error=f"Topic {name} does not exist")
    result = None
    error = None
    if partition >= len(t["partitions"]):
        error = f"Topic {name} has no partition {partition}"
    else:
        try:
            result = await request.app[SERVICE].messages(
                name, partition, offset=offset, timestamp_ms=ts, limit=limit)
        except ToolError as e:
            error = str(e)
    return {"topic": t, "result": result, "error": error, "format": fmt,
            "formats": FORMATS, "partition": partition, "limit": limit,
            "offset": "" if offset is None else offset, "timestamp": q.get("timestamp", ""),
            "title": f"Messages of {name}"}


@_page("groups.html")
async def groups(request):
    items = await request.app[SERVICE].groups()
    lags = {}
    for name, points in request.app[SAMPLER].get(
            [f"group.{g['id']}.lag" for g in items]).items():
        if points:
            lags[name[len("group."):-len(".lag")]] = points[-1][1]
    return {"groups": items, "lags": lags, "title": "Consumer groups"}


@_page("group.html")
async def group(request):
    gid = request.match_info["id"]
    g = await request.app[SERVICE].group(gid)
    return {"group": g, "title": f"Group {gid}"}


def _check_write(request: web.Request) -> None:
    if not request.app[SETTINGS]["allow_writes"]:
        raise web.HTTPForbidden(
            text="This console is read-only: start it with --allow-writes to change the "
                 "cluster.")
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if origin:
        from urllib.parse import urlsplit

        if urlsplit(origin).netloc != request.host:
            raise web.HTTPForbidden(text="cross-site request refused")


async def create_topic(request: web.Request) -> web.Response:
    _check_write(request)
    form = await request.post()
    name = str(form.get("name", "")).strip()
    if not _TOPIC_RE.match(name) or name in (".", ".."):
        raise web.HTTPBadRequest(text="topic names are 1-249 of [a-zA-Z0-9._-]")
    try:
        partitions = int(form.get("partitions") or -1)
        replication = int(form.get("replication") or -1)
    except ValueError:
        raise web.HTTPBadRequest(text="partitions and replication must be integers") from None
    configs = {}
    for line in str(form.get("configs", "")).splitlines():
        if line.strip():
            k, eq, v = line.partition("=")
            if not eq:
                raise web.HTTPBadRequest(text=f"config line {line!r} is not key=value")
            configs[k.strip()] = v.strip()
    try:
        await request.app[SERVICE].create_topic(name, partitions, replication, configs)
    except ClusterUnavailable as e:
        return await _unavailable(request, e)
    except ToolError as e:
        return await _render(request, "error.html", status=400, error=str(e))
    raise web.HTTPSeeOther(f"/topics/{name}?message=created")


async def delete_topic(request: web.Request) -> web.Response:
    _check_write(request)
    name = request.match_info["name"]
    try:
        await request.app[SERVICE].delete_topic(name)
    except ClusterUnavailable as e:
        return await _unavailable(request, e)
    except ToolError as e:
        return await _render(request, "error.html", status=400, error=str(e))
    raise web.HTTPSeeOther("/topics?message=deleted")


async def series(request: web.Request) -> web.Response:
    names = request.query.getall("name", [])[:50]
    return web.json_response(request.app[SAMPLER].get(names))


async def healthz(request: web.Request) -> web.Response:
    s = request.app[SAMPLER]
    return web.json_response({"cluster_reachable": s.last_error is None and
                              s.last_ok is not None, "error": s.last_error})


@web.middleware
async def security_headers(request: web.Request, handler):
    resp = await handler(request)
    resp.headers.setdefault("Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                            "script-src 'self'; frame-ancestors 'none'")
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    return resp


def make_app(bootstrap: str, *, allow_writes: bool = False, refresh_seconds: float = 5.0,
             timeout: float = 10.0) -> web.Application:
    app = web.Application(middlewares=[security_headers])
    service = ClusterService(bootstrap, timeout=timeout)
    sampler = Sampler(service, interval=refresh_seconds)
    app[SERVICE] = service
    app[SAMPLER] = sampler
    app[SETTINGS] = {"bootstrap": bootstrap, "allow_writes": allow_writes,
                     "refresh_ms": int(refresh_seconds * 1000)}
    app[ENV] = _env()
    app.router.add_get("/", overview)
    app.router.add_get("/brokers/{id}", broker)
    app.router.add_get("/topics", topics)
    app.router.add_post("/topics", create_topic)
    app.router.add_get("/topics/{name}", topic)
    app.router.add_post("/topics/{name}/delete", delete_topic)
    app.router.add_get("/topics/{name}/messages", messages)
    app.router.add_get("/groups", groups)
    app.router.add_get("/groups/{id}", group)
    app.router.add_get("/api/series", series)
    app.router.add_get("/healthz", healthz)
    app.router.add_static("/static/", HERE / "static")

    async def on_startup(app):
        sampler.start()

    async def on_cleanup(app):
        await sampler.stop()
        service.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
