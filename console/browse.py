"""Reading records for the message browser and the live tail: one partition or all of them,
oldest- or newest-first, filtered on key, value, headers and a JSON field.

Filters (:class:`Filters`) are case-sensitive substring tests on the UTF-8 text of the key,
the value and each header (``name`` or ``name=value``, matched against ``name=value``), and a
JSON field: ``path`` in dotted form (``customer.id``, ``items[0].sku``, an optional leading
``$.``) whose value, as text (strings without quotes, other values as JSON), equals
``json_value``, or simply exists when ``json_value`` is empty. A record must pass every filter
given.

:func:`read` scans at most ``scan_limit`` records to find ``limit`` matches: forward from an
offset or a timestamp (ListOffsets by time), or backward from the log end in windows for
newest-first (and for the default view, the last ``limit`` records). With several partitions
the matches are merged by timestamp. :func:`tail` is one long-poll Fetch (``max_wait_ms``)
from given positions. APIs: Metadata, ListOffsets, Fetch (v4-v12, READ_UNCOMMITTED).
"""

from __future__ import annotations

import datetime
import json
import re
import time
from dataclasses import dataclass

from client.connection import ToolError
from client.metadata import check_error
from client.offsets import EARLIEST, LATEST
from client.records import fetched_records
from console.queries import leaders_of, offsets

__all__ = ["Filters", "read", "tail", "positions_at_end", "record_dict"]

FETCH = 1
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class Filters:
    key: str = ""
    value: str = ""
    header: str = ""
    json_path: str = ""
    json_value: str = ""

    @property
    def active(self) -> bool:
        return bool(self.key or self.value or self.header or self.json_path)

    def match(self, r: dict) -> bool:
        if self.key and self.key not in _text(r["key"]):
            return False
        if self.value and self.value not in _text(r["value"]):
            return False
        if self.header and not any(self.header in f"{k}={_text(v)}" for k, v in r["headers"]):
            return False
        if self.json_path:
            found, v = json_field(r["value"], self.json_path)
            if not found:
                return False
            if self.json_value and _json_text(v) != self.json_value:
                return False
        return True


def _text(b: bytes | None) -> str:
    return "" if b is None else b.decode("utf-8", errors="replace")


def _json_text(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def json_field(value: bytes | None, path: str) -> tuple[bool, object]:
    """(found, value) of ``path`` in the JSON document ``value``."""
    try:
        node = json.loads(_text(value))
    except ValueError:
        return False, None
    path = path.strip()
    path = path[2:] if path.startswith("$.") else path.lstrip("$")
    for name, index in _PATH_PART.findall(path):
        if index:
            if not isinstance(node, list) or int(index) >= len(node):
                return False, None
            node = node[int(index)]
        else:
            if not isinstance(node, dict) or name not in node:
                return False, None
            node = node[name]
    return True, node


def record_dict(partition: int, r, ts_type: int) -> dict:
    ts = r.timestamp
    when = ""
    if ts is not None and ts >= 0:
        when = datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    return {"partition": partition, "offset": r.offset, "timestamp": ts, "time": when,
            "timestamp_type": "LogAppendTime" if ts_type == 1 else "CreateTime",
            "key": None if r.key is None else bytes(r.key),
            "value": None if r.value is None else bytes(r.value),
            "headers": [(k, None if v is None else bytes(v)) for k, v in (r.headers or [])]}


def _fetch(c, leader: int, topic: str, positions: dict[int, int], max_wait_ms: int,
           max_bytes: int = 1 << 20) -> dict[int, tuple[list[dict], int]]:
    """One Fetch from ``leader``: partition -> (records, next position)."""
    version = c.version_for(FETCH, max_version=12)
    resp = c.request(FETCH, {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1 if max_wait_ms else 0,
        "max_bytes": 8 * max_bytes, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": p, "fetch_offset": off, "partition_max_bytes": max_bytes}
            for p, off in sorted(positions.items())]}],
        "forgotten_topics_data": [], "rack_id": ""}, version=version, node=leader,
        timeout=c.timeout + max_wait_ms / 1000.0)
    out: dict[int, tuple[list[dict], int]] = {}
    for t in resp.responses:
        for pr in t.partitions:
            p = pr.partition_index
            if p not in positions:
                continue
            check_error(pr.error_code, None, f"fetch {topic}-{p}")
            pos, records = positions[p], []
            for item, nxt in fetched_records(pr.records, positions[p]):
                pos = max(pos, nxt)
                if item is not None:
                    records.append(record_dict(p, item[0], item[1]))
            out[p] = (records, pos)
    return out


def _scan(c, topic: str, p: int, leader: int, start: int, stop: int, filters: Filters,
          want: int, budget: list[int], deadline: float) -> list[dict]:
    """Matches in [start, stop) reading forward, at most ``want``; ``budget[0]`` counts the
    records still allowed to be scanned."""
    found: list[dict] = []
    pos = start
    while pos < stop and len(found) < want and budget[0] > 0 and time.monotonic() < deadline:
        records, nxt = _fetch(c, leader, topic, {p: pos}, 0).get(p, ([], pos))
        if nxt <= pos:
            break
        for r in records:
            if r["offset"] >= stop:
                break
            budget[0] -= 1
            if filters.match(r):
                found.append(r)
                if len(found) >= want:
                    break
        pos = nxt
    return found


def read(c, topic: str, partition: int | None, *, offset: int | None = None,
         timestamp_ms: int | None = None, limit: int = 50, newest_first: bool = False,
         filters: Filters = Filters(), scan_limit: int = 10_000,
         time_limit_s: float = 8.0) -> dict:
    """Records of ``partition`` (None: every partition), see the module docstring."""
    md = c.metadata([topic])
    leaders = leaders_of(md)
    parts = sorted(p for t, p in leaders if t == topic)
    if partition is not None:
        if partition not in parts:
            raise ToolError(f"unknown partition {topic}-{partition}")
        parts = [partition]
    tps = [(topic, p) for p in parts]
    starts = offsets(c, tps, leaders, EARLIEST)
    ends = offsets(c, tps, leaders, LATEST)
    at_time = offsets(c, tps, leaders, timestamp_ms) if timestamp_ms is not None else {}
    budget = [scan_limit]
    deadline = time.monotonic() + time_limit_s
    records: list[dict] = []
    firsts: dict[int, int] = {}
    for p in parts:
        tp = (topic, p)
        if tp not in starts or tp not in ends:
            continue  # its leader does not answer
        start, end, leader = starts[tp], ends[tp], leaders[tp]
        if newest_first or (offset is None and timestamp_ms is None):
            got: list[dict] = []
            stop = end
            window = max(limit, 100) if filters.active else limit
            while stop > start and len(got) < limit and budget[0] > 0 and \
                    time.monotonic() < deadline:
                lo = max(start, stop - window)
                got = _scan(c, topic, p, leader, lo, stop, filters, 1 << 30, budget,
                            deadline) + got
                stop, window = lo, window * 2
            got = got[-limit:]
            firsts[p] = got[0]["offset"] if got else end
        else:
            pos = at_time.get(tp, -1) if timestamp_ms is not None else offset
            pos = end if pos is None or pos < 0 else min(max(pos, start), end)
            firsts[p] = pos
            got = _scan(c, topic, p, leader, pos, end, filters, limit, budget, deadline)
        records.extend(got)
    records.sort(key=lambda r: (r["timestamp"] or 0, r["partition"], r["offset"]),
                 reverse=newest_first)
    if newest_first:
        records = records[:limit]
    else:
        records = records[-limit:] if offset is None and timestamp_ms is None else \
            records[:limit]
    nxt = None
    if partition is not None and records and not newest_first:
        nxt = max(r["offset"] for r in records) + 1
    return {"topic": topic, "partition": partition, "partitions": parts,
            "ranges": {p: (starts.get((topic, p)), ends.get((topic, p))) for p in parts},
            "first": firsts.get(partition) if partition is not None else None,
            "next": nxt, "end": ends.get((topic, partition)) if partition is not None
            else None, "records": records, "scanned": scan_limit - budget[0],
            "truncated": budget[0] <= 0 or time.monotonic() >= deadline}


def positions_at_end(c, topic: str, partition: int | None) -> tuple[dict, dict]:
    """(leaders by partition, log end offset by partition) where a tail starts."""
    md = c.metadata([topic])
    leaders = {p: lead for (t, p), lead in leaders_of(md).items() if t == topic and
               (partition is None or p == partition)}
    if not leaders:
        raise ToolError(f"topic {topic} has no partition {partition}" if partition is not None
                        else f"topic {topic} does not exist")
    ends = offsets(c, [(topic, p) for p in leaders], {(topic, p): lead
                                                        for p, lead in leaders.items()},
                   LATEST)
    return leaders, {p: off for (_t, p), off in ends.items()}


def tail(c, topic: str, leaders: dict[int, int], positions: dict[int, int],
         filters: Filters, max_wait_ms: int = 1000) -> list[dict]:
    """One long poll per leader from ``positions`` (advanced in place); matching records.
    A partition whose leader moved is looked up again on the next call."""
    found: list[dict] = []
    by_leader: dict[int, dict[int, int]] = {}
    for p, off in positions.items():
        by_leader.setdefault(leaders.get(p, -1), {})[p] = off
    if -1 in by_leader:
        md = c.metadata([topic])
        leaders.update({p: lead for (t, p), lead in leaders_of(md).items() if t == topic})
    wait = max_wait_ms // max(1, len(by_leader))
    for leader, group in by_leader.items():
        if leader < 0:
            continue
        try:
            got = _fetch(c, leader, topic, group, wait)
        except ToolError as e:
            if "NOT_LEADER" in str(e) or "UNKNOWN_TOPIC" in str(e):
                for p in group:
                    leaders[p] = -1
                continue
            raise
        for p, (records, nxt) in got.items():
            positions[p] = nxt
            found.extend(r for r in records if filters.match(r))
    found.sort(key=lambda r: (r["timestamp"] or 0, r["partition"], r["offset"]))
    return found
