"""The console's read-only pages: ``/`` (cluster: brokers with their state, counts, charts),
``/brokers/{id}``, ``/topics`` (search, sort, pagination), ``/topics/{name}``,
``/topics/{name}/messages`` (the message browser: one or all partitions, oldest- or
newest-first, from an offset or a time, filters on key/value/headers/JSON field; the live
tail is :mod:`console.tail`), ``/groups`` and ``/groups/{id}``.

Query parameters of ``/topics``: ``q`` (name contains, case-insensitive), ``sort``
(``name``, ``partitions``, ``replication``, ``under_replicated``, ``messages``, ``size``),
``dir`` (``asc``/``desc``), ``page`` (from 1), ``per_page`` (10-500, default 50),
``internal=1`` (show internal topics).
"""

from __future__ import annotations

import datetime

from aiohttp import web

from client.connection import ToolError
from console import browse, queries
from console.rendering import SAMPLER, SERVICE, page, render

__all__ = ["register"]

FORMATS = ("text", "json", "hex")
TOPIC_SORTS = ("name", "partitions", "replication", "under_replicated", "messages", "size")


def int_param(query, key: str, default=None, low: int | None = None,
              high: int | None = None):
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


def timestamp_param(raw: str) -> int | None:
    """Milliseconds, or an ISO 8601 time (UTC when no zone is given)."""
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


def _brokers_with_metrics(request) -> set[int]:
    return set(request.app[SAMPLER].metrics_urls)


@page("overview.html")
async def overview(request):
    cluster = await request.app[SERVICE].run(queries.cluster)
    return {"cluster": cluster, "title": "Cluster", "with_metrics": _brokers_with_metrics(request)}


@page("broker.html")
async def broker(request):
    try:
        broker_id = int(request.match_info["id"])
    except ValueError:
        raise web.HTTPNotFound() from None
    b = await request.app[SERVICE].run(queries.broker, broker_id)
    if b is None:
        return await render(request, "error.html", status=404,
                            error=f"Broker {broker_id} is not in the cluster")
    return {"broker": b, "has_metrics": broker_id in _brokers_with_metrics(request),
            "title": f"Broker {broker_id}"}


@page("topics.html")
async def topics(request):
    q = request.query
    show_internal = q.get("internal") == "1"
    search = q.get("q", "").strip()
    sort = q.get("sort", "name") if q.get("sort") in TOPIC_SORTS else "name"
    desc = q.get("dir") == "desc"
    per_page = int_param(q, "per_page", 50, low=10, high=500)
    items = await request.app[SERVICE].run(queries.topics)
    if not show_internal:
        items = [t for t in items if not t["internal"]]
    if search:
        items = [t for t in items if search.lower() in t["name"].lower()]
    items.sort(key=lambda t: (t[sort], t["name"]), reverse=desc)
    pages = max(1, -(-len(items) // per_page))
    current = int_param(q, "page", 1, low=1, high=pages)
    shown = items[(current - 1) * per_page:current * per_page]
    return {"topics": shown, "total": len(items), "show_internal": show_internal,
            "search": search, "sort": sort, "desc": desc, "page": current, "pages": pages,
            "per_page": per_page, "sorts": TOPIC_SORTS, "title": "Topics"}


@page("topic.html")
async def topic(request):
    name = request.match_info["name"]
    t = await request.app[SERVICE].run(queries.topic, name)
    if t is None:
        return await render(request, "error.html", status=404,
                            error=f"Topic {name} does not exist")
    return {"topic": t, "title": f"Topic {name}"}


def browse_params(q) -> dict:
    """The message browser's form, parsed (shared by the page and the live tail)."""
    raw = q.get("partition", "0").strip()
    partition = None if raw in ("all", "") else int_param(q, "partition", 0, low=0)
    return {"partition": partition,
            "filters": browse.Filters(key=q.get("key", ""), value=q.get("value", ""),
                                      header=q.get("header", ""),
                                      json_path=q.get("json_path", "").strip(),
                                      json_value=q.get("json_value", ""))}


@page("messages.html")
async def messages(request):
    name = request.match_info["name"]
    q = request.query
    fmt = q.get("format", "text") if q.get("format") in FORMATS else "text"
    params = browse_params(q)
    limit = int_param(q, "limit", 50, low=1, high=500)
    offset = int_param(q, "offset")
    ts = timestamp_param(q.get("timestamp", ""))
    newest = q.get("order") == "newest"
    service = request.app[SERVICE]
    t = await service.run(queries.topic, name)
    if t is None:
        return await render(request, "error.html", status=404,
                            error=f"Topic {name} does not exist")
    result, error = None, None
    try:
        result = await service.run(lambda c: browse.read(
            c, name, params["partition"], offset=offset, timestamp_ms=ts, limit=limit,
            newest_first=newest, filters=params["filters"]))
    except ToolError as e:
        error = str(e)
    return {"topic": t, "result": result, "error": error, "format": fmt, "formats": FORMATS,
            "partition": "all" if params["partition"] is None else params["partition"],
            "filters": params["filters"], "limit": limit, "order": "newest" if newest else
            "oldest", "offset": "" if offset is None else offset,
            "timestamp": q.get("timestamp", ""), "query": q,
            "title": f"Messages of {name}"}


@page("groups.html")
async def groups(request):
    items = await request.app[SERVICE].run(queries.groups)
    lags = {}
    for name, points in request.app[SAMPLER].get(
            [f"group.{g['id']}.lag" for g in items]).items():
        if points:
            lags[name[len("group."):-len(".lag")]] = points[-1][1]
    return {"groups": items, "lags": lags, "title": "Consumer groups"}


@page("group.html")
async def group(request):
    gid = request.match_info["id"]
    g = await request.app[SERVICE].run(queries.group, gid)
    return {"group": g, "title": f"Group {gid}"}


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/", overview)
    router.add_get("/brokers/{id}", broker)
    router.add_get("/topics", topics)
    router.add_get("/topics/{name}", topic)
    router.add_get("/topics/{name}/messages", messages)
    router.add_get("/groups", groups)
    router.add_get("/groups/{id}", group)
