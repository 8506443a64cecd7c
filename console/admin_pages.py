"""The console's operator pages: ``/acls``, ``/users`` (SCRAM credentials), ``/quotas``,
``/transactions``, ``/reassignments`` and ``/log-dirs``, each one table from
:mod:`console.admin`. A cluster that refuses one of these APIs (no authorizer, an old
broker) shows the error on the page rather than failing the console."""

from __future__ import annotations

import datetime

from aiohttp import web

from client.connection import ToolError
from console import admin
from console.rendering import SERVICE, page

__all__ = ["register"]


async def _load(request, fn):
    try:
        return await request.app[SERVICE].run(fn), None
    except ToolError as e:
        return None, str(e)


def _when(ms) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
        timespec="seconds").replace("+00:00", "Z")


@page("acls.html")
async def acls(request):
    data, error = await _load(request, admin.acls)
    return {"data": data, "error": error, "title": "ACLs"}


@page("users.html")
async def users(request):
    data, error = await _load(request, admin.scram_users)
    return {"users": data or [], "error": error, "title": "SCRAM users"}


@page("quotas.html")
async def quotas(request):
    data, error = await _load(request, admin.quotas)
    return {"quotas": data or [], "error": error, "title": "Quotas"}


@page("transactions.html")
async def transactions(request):
    data, error = await _load(request, admin.transactions)
    for t in data or []:
        t["started"] = _when(t["start_ms"])
    return {"transactions": data or [], "error": error, "title": "Transactions"}


@page("reassignments.html")
async def reassignments(request):
    data, error = await _load(request, admin.reassignments)
    return {"reassignments": data or [], "error": error, "title": "Reassignments"}


@page("log_dirs.html")
async def log_dirs(request):
    data, error = await _load(request, admin.log_dirs)
    return {"brokers": data or [], "error": error, "title": "Log dirs"}


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/acls", acls)
    router.add_get("/users", users)
    router.add_get("/quotas", quotas)
    router.add_get("/transactions", transactions)
    router.add_get("/reassignments", reassignments)
    router.add_get("/log-dirs", log_dirs)
