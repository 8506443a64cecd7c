"""Bytes copied per partition for ``reassign-partitions --verify``.

For every partition of the reassignment file: the leader's replica size (DescribeLogDirs to
the leader, summed over its log dirs, future replicas left out) and the size of each replica
being added (DescribeLogDirs to that broker). A partition still moving shows the slowest
added replica's bytes out of the leader's; a finished one shows the leader's size at 100%.
A broker that does not answer within ``timeout_s`` leaves its replicas out (shown as
``size unknown``). APIs: Metadata, DescribeLogDirs (v1+, to each broker through
``client.admin.AdminRouter.broker``).
"""

from __future__ import annotations

from cli._progress import static_bar
from client.admin import AdminRouter
from client.connection import ToolError

__all__ = ["verify_bars"]

DESCRIBE_LOG_DIRS = 35


def _replica_sizes(router: AdminRouter, broker: int, tps: set[tuple[str, int]],
                   timeout_s: float) -> dict[tuple[str, int], int] | None:
    """(topic, partition) -> bytes on ``broker`` (current replicas only); None if unreachable."""
    topics: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        topics.setdefault(t, []).append(p)
    try:
        resp = router.broker(broker, DESCRIBE_LOG_DIRS, {"topics": [
            {"topic": t, "partitions": ps} for t, ps in topics.items()]}, timeout=timeout_s)
    except (ToolError, OSError):
        return None
    sizes: dict[tuple[str, int], int] = {}
    for res in resp.results:
        if res.error_code:
            continue
        for t in res.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if tp in tps and not p.is_future_key:
                    sizes[tp] = sizes.get(tp, 0) + p.partition_size
    return sizes


def verify_bars(client, wanted: dict, ongoing: dict,
                timeout_s: float = 5.0) -> dict[tuple[str, int], str]:
    """(topic, partition) -> one bar line (``static_bar``) for each partition of ``wanted``
    (``{tp: target replicas}``); ``ongoing`` is ListPartitionReassignments' answer by tp."""
    router = AdminRouter(client)
    leaders = router.leaders(sorted({t for t, _ in wanted}))
    needs: dict[int, set[tuple[str, int]]] = {}
    for tp in wanted:
        if leaders.get(tp, -1) >= 0:
            needs.setdefault(leaders[tp], set()).add(tp)
        if tp in ongoing:
            for b in ongoing[tp].adding_replicas:
                needs.setdefault(b, set()).add(tp)
    sizes = {b: _replica_sizes(router, b, tps, timeout_s) for b, tps in sorted(needs.items())}
    out = {}
    for tp in sorted(wanted):
        name = f"{tp[0]}-{tp[1]}"
        total = (sizes.get(leaders.get(tp, -1)) or {}).get(tp)
        if total is None:
            out[tp] = f"{name}: size unknown (leader {leaders.get(tp, -1)} did not answer)"
            continue
        adding = list(ongoing[tp].adding_replicas) if tp in ongoing else []
        if not adding:  # finished, or only removing replicas: every byte is in place
            out[tp] = static_bar(name, total, total)
            continue
        copied = [(sizes.get(b) or {}).get(tp) for b in adding]
        known = [(c, b) for c, b in zip(copied, adding, strict=True) if c is not None]
        if not known:
            out[tp] = f"{name}: size unknown (brokers {','.join(map(str, adding))} did not answer)"
            continue
        done, slowest = min(known)
        out[tp] = static_bar(name, done, total) + f" on broker {slowest}"
    return out
