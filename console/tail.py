"""The message browser's live tail: ``GET /topics/{name}/tail`` streams new records as
server-sent events (``text/event-stream``, the HTML standard's EventSource).

It takes the browser's parameters (``partition`` or ``all``, the key/value/header/JSON
filters, ``format``), starts at the current log end offsets and long-polls Fetch (1 s) on a
client of its own, in a thread of its own (at most ``MAX_TAILS`` at once; more get 503), so
tails never hold the page workers. Events: ``record`` with one JSON record (``partition``,
``offset``, ``time``, ``key``, ``value``, ``headers``, texts formatted as the browser shows
them), ``status`` with ``{"positions": {partition: offset}}`` once at the start, and
``problem`` with a message when the cluster cannot be reached (the tail keeps retrying). A
comment line every 5 s keeps proxies from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time

from aiohttp import web

from client.connection import ToolError
from console import browse
from console.rendering import SERVICE, format_value
from console.service import ClusterUnavailable

__all__ = ["register"]

log = logging.getLogger(__name__)

MAX_TAILS = 8
POLL_MS = 1000
KEEPALIVE_S = 5.0
TAILS = web.AppKey("tails", concurrent.futures.ThreadPoolExecutor)
OPEN = web.AppKey("open_tails", list)


def _event(kind: str, data) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _shown(r: dict, fmt: str) -> dict:
    return {"partition": r["partition"], "offset": r["offset"], "time": r["time"],
            "timestamp": r["timestamp"], "key": format_value(r["key"], fmt),
            "value": format_value(r["value"], fmt),
            "headers": [[k, format_value(v, fmt)] for k, v in r["headers"]]}


class _Tail:
    """One tail's client and positions, used from its own thread only."""

    def __init__(self, service, topic: str, partition: int | None,
                 filters: browse.Filters) -> None:
        self.service, self.topic, self.partition, self.filters = (service, topic, partition,
                                                                  filters)
        self.client = None
        self.leaders: dict[int, int] = {}
        self.positions: dict[int, int] = {}

    def start(self) -> dict[int, int]:
        self.client = self.service.new_client("josef-console-tail")
        self.leaders, self.positions = browse.positions_at_end(self.client, self.topic,
                                                               self.partition)
        return dict(self.positions)

    def poll(self) -> list[dict]:
        try:
            if self.client is None:
                self.client = self.service.new_client("josef-console-tail")
            return browse.tail(self.client, self.topic, self.leaders, self.positions,
                               self.filters, POLL_MS)
        except (ToolError, OSError, ClusterUnavailable):
            self.close()
            raise

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


async def tail(request: web.Request) -> web.StreamResponse:
    from console.pages import FORMATS, browse_params

    pool, open_tails = request.app[TAILS], request.app[OPEN]
    if open_tails[0] >= MAX_TAILS:
        raise web.HTTPServiceUnavailable(text="too many live tails open")
    name = request.match_info["name"]
    params = browse_params(request.query)
    fmt = request.query.get("format", "text")
    fmt = fmt if fmt in FORMATS else "text"
    t = _Tail(request.app[SERVICE], name, params["partition"], params["filters"])
    loop = asyncio.get_running_loop()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    open_tails[0] += 1
    try:
        while True:  # the start position, retried until the cluster answers
            try:
                start = await loop.run_in_executor(pool, t.start)
                break
            except (ToolError, OSError, ClusterUnavailable) as e:
                await resp.write(_event("problem", {"message": str(e)}))
                await asyncio.sleep(2)
        await resp.write(_event("status", {"positions": start}))
        last_write = time.monotonic()
        while True:
            try:
                records = await loop.run_in_executor(pool, t.poll)
            except (ToolError, OSError, ClusterUnavailable) as e:
                await resp.write(_event("problem", {"message": str(e)}))
                await asyncio.sleep(1)
                continue
            for r in records:
                await resp.write(_event("record", _shown(r, fmt)))
                last_write = time.monotonic()
            if time.monotonic() - last_write >= KEEPALIVE_S:
                await resp.write(b": keep-alive\n\n")
                last_write = time.monotonic()
    except ConnectionResetError:
        pass  # the browser went away
    finally:
        open_tails[0] -= 1
        await loop.run_in_executor(pool, t.close)
    return resp


def register(app: web.Application) -> None:
    app[TAILS] = concurrent.futures.ThreadPoolExecutor(MAX_TAILS, thread_name_prefix="tail")
    app[OPEN] = [0]
    app.router.add_get("/topics/{name}/tail", tail)

    async def on_cleanup(app):
        app[TAILS].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(on_cleanup)
