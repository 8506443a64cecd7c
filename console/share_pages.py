"""The console's share-group pages (KIP-932): ``/share-groups`` and ``/share-groups/{id}``.

Protocol only, so they work with any Kafka 4.1+ cluster: ListGroups (type ``share``) on
every broker, ShareGroupDescribe and DescribeShareGroupOffsets on the coordinator,
ListOffsets for the log end offsets. Per partition the page shows the share-partition start
offset (SPSO) and the records past it (log end - SPSO: not yet acknowledged, i.e. in flight
or not delivered yet). With a group dead-letter topic (``errors.deadletterqueue.topic.name``,
DescribeConfigs of the GROUP) the records in that topic are counted. When the brokers publish
Josef's Prometheus metrics (``prometheus.listener``), the acquired, available, delayed and
pending-dead-letter counts per partition come from ``josef_share_partition_*``.
"""

from __future__ import annotations

import asyncio

from aiohttp import ClientSession, ClientTimeout, web

from client.admin import AdminRouter
from client.connection import ToolError
from client.offsets import LATEST
from console.queries import describe_configs, leaders_of, offsets
from console.rendering import SAMPLER, SERVICE, add_section, page

__all__ = ["register"]

LIST_GROUPS, SHARE_GROUP_DESCRIBE, DESCRIBE_OFFSETS = 16, 77, 90
GROUP_RESOURCE = 32
_GAUGES = ("acquired", "available", "delayed", "pending_dead_letters")


def share_groups(c) -> list[dict]:
    out = []
    for node, resp in AdminRouter(c).each_broker(LIST_GROUPS, {"types_filter": ["share"],
                                                              "states_filter": []}).items():
        if getattr(resp, "error_code", 1):
            continue
        out += [{"id": g.group_id, "state": g.group_state, "coordinator": node}
                for g in resp.groups]
    return sorted(out, key=lambda g: g["id"])


def share_group(c, group_id: str) -> dict:
    router = AdminRouter(c)
    d = router.coordinator(group_id, SHARE_GROUP_DESCRIBE, {"group_ids": [group_id]},
                           errors=lambda r: [g.error_code for g in r.groups]).groups[0]
    r = router.coordinator(group_id, DESCRIBE_OFFSETS,
                           {"groups": [{"group_id": group_id, "topics": None}]},
                           errors=lambda r: [g.error_code for g in r.groups]).groups[0]
    parts = [(t.topic_name, p) for t in r.topics for p in t.partitions]
    tps = sorted({(t, p.partition_index) for t, p in parts})
    ends = offsets(c, tps, leaders_of(c.metadata(sorted({t for t, _ in tps}))), LATEST) \
        if tps else {}
    rows = []
    for topic, p in sorted(parts, key=lambda x: (x[0], x[1].partition_index)):
        end = ends.get((topic, p.partition_index))
        start = p.start_offset if p.start_offset >= 0 else None
        rows.append({"topic": topic, "partition": p.partition_index, "start": start,
                     "end": end, "leader_epoch": p.leader_epoch,
                     "pending": None if start is None or end is None else max(end - start, 0)})
    try:
        configs = describe_configs(c, GROUP_RESOURCE, group_id)
    except ToolError:  # a cluster without group configs
        configs = []
    dlq = next((e["value"] for e in configs
                if e["name"] == "errors.deadletterqueue.topic.name"), "") or None
    dead = None
    if dlq:
        md = c.metadata([dlq])
        leaders = {tp: n for tp, n in leaders_of(md).items() if tp[0] == dlq}
        dead = sum(offsets(c, sorted(leaders), leaders, LATEST).values()) if leaders else 0
    return {"id": group_id, "error": d.error_code, "state": d.group_state,
            "epoch": d.group_epoch, "members": [
                {"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                 "epoch": m.member_epoch, "assignment": sorted(
                     (t.topic_name, p) for t in m.assignment.topic_partitions
                     for p in t.partitions)} for m in d.members],
            "partitions": rows, "dlq": dlq, "dead_lettered": dead}


async def _gauges(urls: list[str], group_id: str) -> dict:
    """{(topic, partition): {gauge: value}} from the brokers' josef_share_partition_*."""
    from prometheus_client.parser import text_string_to_metric_families
    out: dict = {}
    async with ClientSession(timeout=ClientTimeout(total=3)) as session:
        async def one(url):
            try:
                async with session.get(url) as resp:
                    return await resp.text()
            except (TimeoutError, OSError):
                return ""
        for text in await asyncio.gather(*(one(u) for u in urls)):
            for fam in text_string_to_metric_families(text):
                name = fam.name.removeprefix("josef_share_partition_")
                if name not in _GAUGES:
                    continue
                for s in fam.samples:
                    if s.labels.get("group") == group_id:
                        key = (s.labels["topic"], int(s.labels["partition"]))
                        out.setdefault(key, {})[name] = int(s.value)
    return out


@page("share_groups.html")
async def groups_page(request):
    items = await request.app[SERVICE].run(share_groups)
    return {"groups": items, "title": "Share groups"}


@page("share_group.html")
async def group_page(request):
    gid = request.match_info["id"]
    g = await request.app[SERVICE].run(share_group, gid)
    urls = list(request.app[SAMPLER].metrics_urls.values())
    gauges = await _gauges(urls, gid) if urls else {}
    for row in g["partitions"]:
        row.update(gauges.get((row["topic"], row["partition"]), {}))
    return {"group": g, "with_metrics": bool(urls), "title": f"Share group {gid}"}


def register(router: web.UrlDispatcher) -> None:
    add_section("/share-groups", "Share groups", after="/groups")
    router.add_get("/share-groups", groups_page)
    router.add_get("/share-groups/{id}", group_page)
