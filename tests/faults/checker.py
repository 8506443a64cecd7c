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
something was acknowledged; with the transactional workload in the history, also every count
of ``check_transactions`` (committed transactions lost, aborted or partial transactions
visible to read_committed readers, duplicates). Lists of examples are capped at
``EXAMPLES`` entries.
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
        # an offset of None: acknowledged implicitly (librdkafka: a later batch of the same
        # idempotent producer succeeded, so this one was written, where is not reported)
        if places and e.get("offset") is not None and (e["partition"], e["offset"]) not in places:
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
    if any(e.get("type") == "txn_begin" for e in events):
        txn = check_transactions(events, partitions)
        problems.extend(txn.pop("problems"))
        results["examples"].update(txn.pop("examples"))
        results.update(txn)
    results["problems"] = problems
    results["valid"] = not problems
    return results


#: counts of the transactional checks that make a run invalid when above 0
TXN_PROBLEM_KEYS = ("txn_lost", "txn_aborted_visible", "txn_partial", "txn_dirty_reads",
                    "txn_duplicated")


def check_transactions(events: Iterable[dict[str, Any]], partitions: Iterable[int] | None = None
                       ) -> dict[str, Any]:
    """The transactional workload's checks, against its read_committed final read:

    * **txn_lost**: committed transactions (commit confirmed) whose values are not all there;
    * **txn_aborted_visible**: aborted transactions with any value there;
    * **txn_partial**: transactions with some but not all values there (whatever their
      outcome, also unknown ones: all or nothing);
    * **txn_dirty_reads**: values a read_committed consumer was given from a transaction that
      is not wholly in the final read (aborted, or partial);
    * **txn_duplicated**: a value stored twice.
    """
    values: dict[str, list[str]] = {}
    outcome: dict[str, str] = {}
    owner: dict[str, str] = {}
    polls: list[dict[str, Any]] = []
    final: dict[str, list[tuple[int, int]]] = defaultdict(list)
    ends: set[int] = set()
    for e in events:
        kind = e.get("type")
        if kind == "txn_begin":
            values[e["txn"]] = list(e["values"])
            for v in e["values"]:
                owner[v] = e["txn"]
        elif kind in ("txn_committed", "txn_aborted", "txn_unknown"):
            outcome[e["txn"]] = kind[4:]
        elif kind == "txn_poll":
            polls.append(e)
        elif kind == "txn_final":
            final[e["value"]].append((e["partition"], e["offset"]))
        elif kind == "txn_final_end":
            ends.add(e["partition"])
    problems = []
    wanted = set(partitions) if partitions is not None else set()
    if wanted - ends:
        problems.append(f"transactional final read incomplete for {sorted(wanted - ends)}")
    lost, aborted_visible, partial, whole = [], [], [], set()
    for txn, vals in values.items():
        present = [v for v in vals if v in final]
        state = outcome.get(txn, "unknown")
        if len(present) == len(vals):
            whole.add(txn)
        elif present:
            partial.append({"txn": txn, "present": present, "missing":
                            [v for v in vals if v not in final], "outcome": state})
        if state == "committed" and len(present) < len(vals):
            lost.append(txn)
        if state == "aborted" and present:
            aborted_visible.append(txn)
    dirty = [{"member": e["member"], "value": e["value"], "txn": owner.get(e["value"]),
              "outcome": outcome.get(owner.get(e["value"], ""), "unknown")}
             for e in polls if owner.get(e["value"]) not in whole]
    duplicated = {v: places for v, places in final.items() if len(places) > 1}
    out: dict[str, Any] = {
        "txn_transactions": len(values),
        "txn_committed": sum(1 for o in outcome.values() if o == "committed"),
        "txn_aborted": sum(1 for o in outcome.values() if o == "aborted"),
        "txn_unknown": len(values) - sum(1 for o in outcome.values() if o != "unknown"),
        "txn_polled": len(polls),
        "txn_lost": len(lost),
        "txn_aborted_visible": len(aborted_visible),
        "txn_partial": len(partial),
        "txn_dirty_reads": len(dirty),
        "txn_duplicated": len(duplicated),
        "examples": {"txn_lost": lost[:EXAMPLES],
                     "txn_aborted_visible": aborted_visible[:EXAMPLES],
                     "txn_partial": partial[:EXAMPLES], "txn_dirty_reads": dirty[:EXAMPLES],
                     "txn_duplicated": dict(list(duplicated.items())[:EXAMPLES])},
    }
    for key in TXN_PROBLEM_KEYS:
        if out[key]:
            problems.append(f"{key}: {out[key]}")
    if not out["txn_committed"]:
        problems.append("no transaction was committed (no progress)")
    out["problems"] = problems
    return out
