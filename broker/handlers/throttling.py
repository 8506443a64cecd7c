"""Quota bookkeeping for handlers and the dispatcher (KIP-13/55/124/219/599, see
``broker.security.quotas``): record what a request costs for its (user, client id), and
mute the connection for the throttle time (the response carries ``throttle_time_ms``).

* :func:`produce` (request bytes), :func:`fetch` / :func:`unrecord_fetch` (response
  bytes; consumers only: followers are not client-quota'd);
* :func:`request_time` (handler time as a percentage of one thread, for every API but the
  exempt ones: ApiVersions, SASL, and the broker-to-broker APIs);
* :func:`mutations_exceeded` / :func:`record_mutations` (controller mutation rate);
* :func:`throttle` mutes the connection (``Processor.throttle``).

Everything is a no-op without quotas configured.
"""

from __future__ import annotations

__all__ = ["fetch", "mutation_quota", "mutation_quota_enabled", "mutations_exceeded", "produce", "record_mutations",
           "request_time", "throttle", "unrecord_fetch"]

#: APIs the request quota does not apply to (Kafka's ``ApiKeys.clusterActions`` and the
#: ones needed to connect): ApiVersions, SaslHandshake, SaslAuthenticate, LeaderAndIsr,
#: StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterPartition,
#: BrokerHeartbeat-style internals
EXEMPT = frozenset({18, 17, 36, 4, 5, 6, 7, 27, 56})


def _quotas(ctx):
    security = getattr(ctx.broker, "security", None)
    return security.quotas if security is not None else None


def _who(ctx) -> tuple[str, str]:
    return ctx.principal.name, ctx.client_id or ""


def throttle(ctx, ms: int) -> None:
    if ms > 0 and ctx.processor is not None:
        ctx.processor.throttle(ms)


def produce(ctx, size: int) -> int:
    q = _quotas(ctx)
    if q is None or not q.produce.enabled:
        return 0
    return q.produce.record(*_who(ctx), size)


def fetch(ctx, size: int) -> int:
    q = _quotas(ctx)
    if q is None or not q.fetch.enabled:
        return 0
    return q.fetch.record(*_who(ctx), size)


def unrecord_fetch(ctx, size: int) -> None:
    q = _quotas(ctx)
    if q is not None:
        q.fetch.unrecord(*_who(ctx), size)


def request_time(ctx, seconds: float) -> int:
    """Record ``seconds`` of handler time; the request-quota throttle time in ms."""
    q = _quotas(ctx)
    if q is None or not q.request.enabled or ctx.header.api_key in EXEMPT:
        return 0
    return q.request.record(*_who(ctx), seconds * 100.0)


def mutation_quota_enabled(ctx) -> bool:
    q = _quotas(ctx)
    return q is not None and q.controller_mutation.manager.enabled


def mutations_exceeded(ctx) -> int:
    q = _quotas(ctx)
    return 0 if q is None else q.controller_mutation.exceeded(*_who(ctx))


def record_mutations(ctx, count: int) -> int:
    q = _quotas(ctx)
    return 0 if q is None else q.controller_mutation.record(*_who(ctx), count)


def mutation_quota(ctx, strict_since: int, items: list[tuple[str, int]]
                   ) -> tuple[set[str], int]:
    """KIP-599 for CreateTopics (strict since v6), CreatePartitions (v3), DeleteTopics (v5):
    ``items`` are (topic, partitions created/deleted). Returns the topics refused with
    THROTTLING_QUOTA_EXCEEDED (strict versions: once the bucket is empty) and the throttle
    time for the response (the connection is muted for it)."""
    q = _quotas(ctx)
    if q is None or not q.controller_mutation.manager.enabled:
        return set(), 0
    strict = ctx.api_version >= strict_since
    refused: set[str] = set()
    for name, count in items:
        if strict and mutations_exceeded(ctx):
            refused.add(name)
            continue
        record_mutations(ctx, max(0, count))
    ms = mutations_exceeded(ctx)
    throttle(ctx, ms)
    return refused, ms
