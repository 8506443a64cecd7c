"""The console's pages: the application keys the handlers read (``SERVICE``, ``SAMPLER``,
``SETTINGS``), the navigation, value formatting and page rendering (Jinja2, HTML autoescaped:
every name, key, value and header from the cluster is shown as text). Handlers
(:mod:`console.pages`, :mod:`console.admin_pages`, :mod:`console.share_pages`,
:mod:`console.write_routes`, :mod:`console.tail`) use :func:`page` / :func:`render`;
:mod:`console.app` builds the application and its routes.

Navigation: :data:`SECTIONS` lists (path, label) in menu order; a page family adds its entry
with :func:`add_section` (:mod:`console.share_pages` adds share groups after consumer groups).

When no broker can be reached every page shows a banner (HTTP 503) instead of failing.
"""

from __future__ import annotations

import json
import logging
import string
from pathlib import Path

import jinja2
from aiohttp import web

from client.connection import ToolError
from console.sampler import Sampler
from console.service import ClusterService, ClusterUnavailable

__all__ = ["ENV", "HERE", "SAMPLER", "SECTIONS", "SERVICE", "SETTINGS", "add_section",
           "format_value", "make_env", "page", "render", "size"]

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SERVICE = web.AppKey("service", ClusterService)
SAMPLER = web.AppKey("sampler", Sampler)
SETTINGS = web.AppKey("settings", dict)
ENV = web.AppKey("env", jinja2.Environment)
_PRINTABLE = set(string.printable) - set("\x0b\x0c")

SECTIONS: list[tuple[str, str]] = [
    ("/", "Cluster"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
    ("/acls", "ACLs"), ("/users", "SCRAM users"), ("/quotas", "Quotas"),
    ("/transactions", "Transactions"), ("/reassignments", "Reassignments"),
    ("/log-dirs", "Log dirs"),
]


def add_section(path: str, label: str, after: str | None = None) -> None:
    """Add a menu entry (after the entry whose path is ``after``, else at the end)."""
    at = next((i + 1 for i, (p, _) in enumerate(SECTIONS) if p == after), len(SECTIONS))
    if all(p != path for p, _ in SECTIONS):
        SECTIONS.insert(at, (path, label))


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


def size(n) -> str:
    if n is None or n < 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["size"] = size
    env.filters["value"] = format_value
    return env


def _section_of(path: str) -> str:
    if path.startswith("/brokers"):
        return "/"
    best = "/"
    for p, _ in SECTIONS:
        if p != "/" and (path == p or path.startswith(p + "/")) and len(p) > len(best):
            best = p
    return best


async def render(request: web.Request, template: str, status: int = 200, **ctx) -> web.Response:
    app = request.app
    sampler = app[SAMPLER]
    ctx.setdefault("banner", None)
    ctx.setdefault("title", "Josef")
    ctx.setdefault("message", request.query.get("message"))
    if ctx["banner"] is None and sampler.last_error and sampler.last_ok is None:
        ctx["banner"] = sampler.last_error
    html = app[ENV].get_template(template).render(
        settings=app[SETTINGS], path=request.path, sections=SECTIONS,
        section=_section_of(request.path), connected_to=app[SERVICE].connected_to, **ctx)
    return web.Response(text=html, content_type="text/html", status=status)


def page(template: str):
    """Decorator: a handler returning a context dict, rendered into ``template``; an
    unreachable cluster becomes the banner page, a cluster error an error message."""

    def wrap(fn):
        async def handler(request: web.Request) -> web.StreamResponse:
            try:
                ctx = await fn(request)
                if not isinstance(ctx, web.StreamResponse):
                    ctx = await render(request, template, **ctx)
            except ClusterUnavailable as e:
                return await render(request, "unavailable.html", status=503, banner=str(e))
            except ToolError as e:
                return await render(request, "error.html", status=502, error=str(e))
            except web.HTTPException:
                raise
            except Exception as e:  # noqa: BLE001 - a page never shows a traceback
                log.exception("page %s failed", request.path)
                return await render(request, "error.html", status=500,
                                    error=f"internal error: {e!r}")
            return ctx

        handler.__name__ = fn.__name__
        return handler

    return wrap
