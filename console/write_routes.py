"""The console's write endpoints (POST forms), refused with 403 unless the console runs with
``--allow-writes``, and only from the console's own pages (the ``Origin``/``Referer`` must
match the host). Every write, done or refused by the cluster, is logged on the
``console.audit`` logger (INFO): who (the logged-in user, else the client address), what,
and the outcome.

Endpoints: ``POST /topics`` (create), ``/topics/{name}/delete``, ``/topics/{name}/produce``
(partition (empty: by key), key, value, headers as ``name=value`` lines; ``null`` boxes for
a null key or value), ``/topics/{name}/configs`` (``set``: ``key=value`` lines; ``delete``:
names), ``/topics/{name}/partitions`` (new total ``count``), ``/topics/{name}/delete-records``
(``partition`` or ``all``, ``offset``: delete below it, ``-1`` = everything),
``/groups/{id}/reset`` (``topic`` or empty for all, ``mode`` earliest/latest/timestamp/offset,
``value``). A request that asks for JSON (``Accept: application/json``, the page's script)
gets ``{"ok": bool, "message": text}``; a form post is redirected back with the message.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import quote, urlsplit

from aiohttp import web

from client.connection import ToolError
from console import writes
from console.auth import USER
from console.pages import timestamp_param
from console.rendering import SERVICE, SETTINGS, render
from console.service import ClusterUnavailable

__all__ = ["register", "AUDIT"]

AUDIT = logging.getLogger("console.audit")
AUDIT.setLevel(logging.INFO)
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def check_write(request: web.Request) -> None:
    if not request.app[SETTINGS]["allow_writes"]:
        raise web.HTTPForbidden(
            text="This console is read-only: start it with --allow-writes to change the "
                 "cluster.")
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if origin and urlsplit(origin).netloc != request.host:
        raise web.HTTPForbidden(text="cross-site request refused")


def _who(request: web.Request) -> str:
    return request.get(USER) or request.remote or "-"


def _lines(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for line in str(text).splitlines():
        if line.strip():
            k, eq, v = line.partition("=")
            if not eq or not k.strip():
                raise web.HTTPBadRequest(text=f"{what} line {line!r} is not name=value")
            out.append((k.strip(), v))
    return out


def _int(form, key: str, default=None) -> int | None:
    raw = str(form.get(key, "")).strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{key} must be an integer") from None


async def _do(request: web.Request, action: str, detail: str, fn, back: str):
    """Run the write ``fn(client)``, log it, and answer (JSON or a redirect to ``back``)."""
    who = _who(request)
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        text = await request.app[SERVICE].run(fn)
    except (ToolError, ClusterUnavailable) as e:
        AUDIT.info("write by %s: %s %s: failed: %s", who, action, detail, e)
        if wants_json:
            return web.json_response({"ok": False, "message": str(e)}, status=400)
        return await render(request, "error.html", status=400, error=str(e))
    AUDIT.info("write by %s: %s %s: ok: %s", who, action, detail, text)
    if wants_json:
        return web.json_response({"ok": True, "message": text})
    sep = "&" if "?" in back else "?"
    raise web.HTTPSeeOther(f"{back}{sep}message={quote(text)}")


async def create_topic(request: web.Request):
    check_write(request)
    form = await request.post()
    name = str(form.get("name", "")).strip()
    if not _TOPIC_RE.match(name) or name in (".", ".."):
        raise web.HTTPBadRequest(text="topic names are 1-249 of [a-zA-Z0-9._-]")
    partitions, replication = _int(form, "partitions", -1), _int(form, "replication", -1)
    configs = dict(_lines(form.get("configs", ""), "config"))
    return await _do(request, "create topic", name, lambda c: writes.create_topic(
        c, name, partitions, replication, configs), f"/topics/{quote(name)}")


async def delete_topic(request: web.Request):
    check_write(request)
    name = request.match_info["name"]
    return await _do(request, "delete topic", name,
                     lambda c: writes.delete_topic(c, name), "/topics")


async def produce(request: web.Request):
    check_write(request)
    name = request.match_info["name"]
    form = await request.post()
    partition = _int(form, "partition")
    key = None if form.get("key_null") else str(form.get("key", "")).encode()
    if key == b"" and not form.get("key_empty"):
        key = None  # an empty key box means no key, as kafka-console-producer does
    value = None if form.get("value_null") else str(form.get("value", "")).encode()
    headers = [(k, v.encode()) for k, v in _lines(form.get("headers", ""), "header")]
    detail = f"{name} partition={'auto' if partition is None else partition}"
    return await _do(request, "produce", detail, lambda c: writes.produce(
        c, name, partition, key, value, headers), f"/topics/{quote(name)}/messages")


async def alter_configs(request: web.Request):
    check_write(request)
    name = request.match_info["name"]
    form = await request.post()
    set_ = dict(_lines(form.get("set", ""), "config"))
    delete = [k.strip() for k in re.split(r"[\s,]+", str(form.get("delete", ""))) if k.strip()]
    return await _do(request, "alter configs", name, lambda c: writes.alter_topic_configs(
        c, name, set_, delete), f"/topics/{quote(name)}")


async def add_partitions(request: web.Request):
    check_write(request)
    name = request.match_info["name"]
    count = _int(await request.post(), "count")
    if count is None or count < 1:
        raise web.HTTPBadRequest(text="count must be the new number of partitions")
    return await _do(request, "add partitions", f"{name} count={count}",
                     lambda c: writes.add_partitions(c, name, count), f"/topics/{quote(name)}")


async def delete_records(request: web.Request):
    check_write(request)
    name = request.match_info["name"]
    form = await request.post()
    offset = _int(form, "offset", -1)
    raw = str(form.get("partition", "all")).strip()
    if raw == "all":
        parts = [int(p) for p in form.getall("partitions", [])] or None
    else:
        parts = [_int(form, "partition")]

    def run(c):
        targets = parts
        if targets is None:
            from console.queries import leaders_of

            targets = [p for (t, p) in leaders_of(c.metadata([name])) if t == name]
        return writes.delete_records(c, name, {p: offset for p in targets})

    return await _do(request, "delete records", f"{name} partition={raw} before={offset}",
                     run, f"/topics/{quote(name)}")


async def reset_offsets(request: web.Request):
    check_write(request)
    gid = request.match_info["id"]
    form = await request.post()
    topic = str(form.get("topic", "")).strip() or None
    mode = str(form.get("mode", ""))
    raw = str(form.get("value", "")).strip()
    value = None
    if mode == "timestamp":
        value = timestamp_param(raw)
    elif mode == "offset":
        value = _int(form, "value")
    return await _do(request, "reset offsets", f"{gid} topic={topic or '*'} to={mode} {raw}",
                     lambda c: writes.reset_offsets(c, gid, topic, mode, value),
                     f"/groups/{quote(gid)}")


def register(router: web.UrlDispatcher) -> None:
    router.add_post("/topics", create_topic)
    router.add_post("/topics/{name}/delete", delete_topic)
    router.add_post("/topics/{name}/produce", produce)
    router.add_post("/topics/{name}/configs", alter_configs)
    router.add_post("/topics/{name}/partitions", add_partitions)
    router.add_post("/topics/{name}/delete-records", delete_records)
    router.add_post("/groups/{id}/reset", reset_offsets)
