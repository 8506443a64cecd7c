"""The web console's application: security headers, the optional login, the route table,
the sampler's lifecycle. The pages are in :mod:`console.pages` (read-only pages),
:mod:`console.share_pages`, :mod:`console.admin_pages` (ACLs, users, quotas, transactions,
reassignments, log dirs), :mod:`console.write_routes` (writes, ``--allow-writes`` only) and
:mod:`console.tail` (the live tail, server-sent events); what they share (application keys,
navigation, rendering) is :mod:`console.rendering`.
"""

from __future__ import annotations

from aiohttp import web

from console import admin_pages, pages, share_pages, tail, write_routes
from console.auth import BasicAuth
from console.rendering import ENV, HERE, SAMPLER, SERVICE, SETTINGS, make_env
from console.sampler import Sampler
from console.service import ClusterService

__all__ = ["make_app"]


async def series(request: web.Request) -> web.Response:
    names = request.query.getall("name", [])[:50]
    return web.json_response(request.app[SAMPLER].get(names))


async def healthz(request: web.Request) -> web.Response:
    s = request.app[SAMPLER]
    return web.json_response({"cluster_reachable": s.last_error is None and
                              s.last_ok is not None, "error": s.last_error,
                              "connected_to": request.app[SERVICE].connected_to})


@web.middleware
async def security_headers(request: web.Request, handler):
    resp = await handler(request)
    resp.headers.setdefault("Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                            "script-src 'self'; frame-ancestors 'none'")
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    return resp


def make_app(bootstrap: str, *, allow_writes: bool = False, refresh_seconds: float = 5.0,
             timeout: float = 10.0, users: dict[str, str] | None = None,
             security: dict[str, str] | None = None) -> web.Application:
    middlewares = [security_headers]
    if users:
        middlewares.insert(0, BasicAuth(users).middleware)
    app = web.Application(middlewares=middlewares)
    service = ClusterService(bootstrap, timeout=timeout, security=security)
    sampler = Sampler(service, interval=refresh_seconds)
    app[SERVICE] = service
    app[SAMPLER] = sampler
    app[SETTINGS] = {"bootstrap": bootstrap, "allow_writes": allow_writes,
                     "refresh_ms": int(refresh_seconds * 1000), "login": bool(users)}
    app[ENV] = make_env()
    pages.register(app.router)
    share_pages.register(app.router)
    admin_pages.register(app.router)
    write_routes.register(app.router)
    tail.register(app)
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
