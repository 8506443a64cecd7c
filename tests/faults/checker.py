"""The history checker of the queue workload (see ``tests.faults.history`` for the events).

What it checks, against the final read of every partition after the cluster healed:

* **lost**: acknowledged values (``ok``) absent from the final log. Kafka's promise: a write
  acknowledged with acks=all survives while one in-sync replica lives.
* **offset_mismatch**: an acknowledged value found at another offset than acknowledged (or
  another value at the acknowledged offset).
* **duplicated**: a value stored at more than one offset (idempotent producers: none).
* **reordered**: per partition, (a) one producer's values out of send order in the log, or
  (b) a value acknowledged before another was sent, stored after it (real-time order).
* **disappeared**: a record a consumer read (``poll``) that is not at that offset in the
  final log ("appeared, then disappeared").
* **consumer_offsets_backwards**: within one assignment session a member read an offset not
  above the previous one it read on that partition.
* **commits_ahead_of_reads**: a member committed offset ``o`` without having read ``o - 1``
  of that partition before; **commits_beyond_log**: a committed offset above the final high
  watermark.
* **unexpected**: values in the log no producer ever sent; **failed_but_present**: values
  whose send failed definitely (``fail``) but that are in the log.

``valid`` is True when every count above is 0, the final read covered every partition, and
something was acknowledged. Lists of examples are capped at ``EXAMPLES`` entries.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

EXAMPLES = 20

#: counts that make a run invalid when above 0
PROBLEM_KEYS = ("lost", "offset_mismatch", "duplicated", "reordered", "disappeared",
                "consumer_offsets_backwards", "commits_ahead_of_reads", "commits_beyond_log",
                "unexpected", "failed_but_present")


def _seq(value: str) -> tuple[str, int] | None:
    """``"<process>-<n>"`` -> (process, n); None for values of another shape."""
    head, sep, tail = value.rpartition("-")
    if not sep or not tail.isdigit():
        return None
    return head, int(tail)


def check(events: Iterable[dict[str, Any]], partitions: Iterable[int] | None = None
          ) -> dict[str, Any]:
    """Check a history; returns the results dict (see the module docstring)."""
    events = sorted(events, key=lambda e: e.get("t", 0.0))
    invoked: dict[str, dict[str, Any]] = {}
    acked: dict[str, dict[str, Any]] = {}
    failed: set[str] = set()
    indeterminate: set[str] = set()
    polls: list[dict[str, Any]] = []
    commits: list[dict[str, Any]] = []
    final: dict[int, dict[int, str]] = defaultdict(dict)
    final_end: dict[int, dict[str, Any]] = {}
    nemesis: Counter[str] = Counter()
    client_errors = 0
    backwards: list[Any] = []
    commits_ahead: list[Any] = []
    sessions: dict[tuple[str, int], int] = {}  # (member, partition) -> last offset read
    read_by: dict[tuple[str, int], set[int]] = defaultdict(set)  # offsets a member read

    for e in events:
        kind = e.get("type")
        if kind == "invoke":
            invoked[e["value"]] = e
        elif kind == "ok":
            acked[e["value"]] = e
        elif kind == "fail":
            failed.add(e["value"])
        elif kind == "info":
            indeterminate.add(e["value"])
        elif kind == "assign":
            for p in e.get("partitions", ()):
                sessions.pop((e["member"], p), None)  # a new session starts
        elif kind == "revoke":
            for p in e.get("partitions", ()):
                sessions.pop((e["member"], p), None)
        elif kind == "poll":
            polls.append(e)
            key = (e["member"], e["partition"])
            last = sessions.get(key)
            if last is not None and e["offset"] <= last:
                backwards.append({"member": e["member"], "partition": e["partition"],
                                  "offset": e["offset"], "after": last, "t": e["t"]})
            sessions[key] = e["offset"]
            read_by[key].add(e["offset"])
        elif kind == "commit":
            commits.append(e)
            o = e["offset"]
            if o > 0 and (o - 1) not in read_by[(e["member"], e["partition"])]:
                commits_ahead.append({"member": e["member"], "partition": e["partition"],
                                      "offset": o, "t": e["t"]})
        elif kind == "final":
            final[e["partition"]][e["offset"]] = e["value"]
        elif kind == "final_end":
            final_end[e["partition"]] = e
        elif kind == "nemesis":
            if e.get("phase", "start") == "start":
                nemesis[e["kind"]] += 1
        elif kind == "client_error":
            client_errors += 1

    problems: list[str] = []
    wanted = set(partitions) if partitions is not None else {
        e["partition"] for e in invoked.values()}
    missing_final = sorted(p for p in wanted if p not in final_end)
    if missing_final:
        problems.append(f"final read incomplete for partitions {missing_final}")

    # where each value is in the final log
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, records in final.items():
        for o, v in records.items():
            where[v].append((p, o))

    lost = [v for v in acked if v not in where]
    mismatch = []
    for v, e in acked.items():
        places = where.get(v)
        if places and (e["partition"], e["offset"]) not in places:
            mismatch.append({"value": v, "acked": [e["partition"], e["offset"]],
                             "found": places})
    duplicated = {v: places for v, places in where.items() if len(places) > 1}
    unexpected = [v for v in where if v not in invoked]
    failed_present = [v for v in failed if v in where]

    reordered: list[Any] = []
    first_at = {v: min(places) for v, places in where.items()}  # (partition, offset)
    # (a) one producer's values in send order within a partition (first copies only:
    # duplicates are counted as such)
    for p, records in final.items():
        last_seq: dict[str, tuple[int, int]] = {}
        for o in sorted(records):
            parsed = _seq(records[o])
            if parsed is None or first_at[records[o]] != (p, o):
                continue
            proc, n = parsed
            prev = last_seq.get(proc)
            if prev is not None and n < prev[0]:
                reordered.append({"partition": p, "offset": o, "value": records[o],
                                  "after": f"{proc}-{prev[0]}", "rule": "producer order"})
            last_seq[proc] = (max(n, prev[0]) if prev else n, o)
    # (b) acknowledged before another was sent => stored before it
    acked_max: dict[int, tuple[int, str]] = {}  # partition -> highest offset acked so far
    for e in events:
        v = e.get("value")
        if v not in first_at:
            continue
        p, o = first_at[v]
        if e["type"] == "ok":
            if o > acked_max.get(p, (-1, ""))[0]:
                acked_max[p] = (o, v)
        elif e["type"] == "invoke":
            bound = acked_max.get(p)
            if bound is not None and o < bound[0]:
                reordered.append({"partition": p, "offset": o, "value": v,
                                  "acked_before_send": bound[1], "at": bound[0],
                                  "rule": "real-time order"})

    disappeared = []
    for e in polls:
        stored = final.get(e["partition"], {}).get(e["offset"])
        end = final_end.get(e["partition"])
        if end is not None and e["offset"] < end.get("log_start", 0):
            continue  # deleted by retention, not lost
        if stored != e["value"]:
            disappeared.append({"member": e["member"], "partition": e["partition"],
                                "offset": e["offset"], "value": e["value"], "now": stored})

    beyond = []
    for e in commits:
        end = final_end.get(e["partition"])
        if end is not None and e["offset"] > end["high_watermark"]:
            beyond.append({"member": e["member"], "partition": e["partition"],
                           "offset": e["offset"], "high_watermark": end["high_watermark"]})

    results: dict[str, Any] = {
        "attempted": len(invoked),
        "acknowledged": len(acked),
        "failed": len(failed),
        "indeterminate": len(indeterminate),
        "lost": len(lost),
        "offset_mismatch": len(mismatch),
        "duplicated": len(duplicated),
        "reordered": len(reordered),
        "disappeared": len(disappeared),
        "consumer_offsets_backwards": len(backwards),
        "commits_ahead_of_reads": len(commits_ahead),
        "commits_beyond_log": len(beyond),
        "unexpected": len(unexpected),
        "failed_but_present": len(failed_present),
        "polled": len(polls),
        "committed": len(commits),
        "final_records": sum(len(r) for r in final.values()),
        "indeterminate_present": sum(1 for v in indeterminate if v in where),
        "client_errors": client_errors,
        "nemesis_events": dict(sorted(nemesis.items())),
        "examples": {
            "lost": sorted(lost)[:EXAMPLES],
            "offset_mismatch": mismatch[:EXAMPLES],
            "duplicated": dict(list(duplicated.items())[:EXAMPLES]),
            "reordered": reordered[:EXAMPLES],
            "disappeared": disappeared[:EXAMPLES],
            "consumer_offsets_backwards": backwards[:EXAMPLES],
            "commits_ahead_of_reads": commits_ahead[:EXAMPLES],
            "commits_beyond_log": beyond[:EXAMPLES],
            "unexpected": unexpected[:EXAMPLES],
            "failed_but_present": failed_present[:EXAMPLES],
        },
    }
    for key in PROBLEM_KEYS:
        if results[key]:
            problems.append(f"{key}: {results[key]}")
    if not acked:
        problems.append("nothing was acknowledged (no progress)")
    results["problems"] = problems
    results["valid"] = not problems
    return results
