"""The share-partition leader's persister: the *ShareGroupState RPCs to the share coordinator
(Kafka's DefaultStatePersister / PersisterStateManager), implementing
`coordinator.share.persister.Persister` and the admin operations.

For each call (one share-partition): the key `group:topicId:partition` maps to
`__share_group_state` partition `share_coordinator.partition_for(...)`; its leader in the
metadata cache is the coordinator. When that is this broker the local `ShareCoordinator` is
called directly (no network); otherwise the RPC (`coordinator.share.wire`) goes over the
inter-broker listener (`BrokerLinks`: one connection per broker, TLS/SASL as configured).

When the state topic does not exist yet it is created (`internal_topic_spec`: Kafka's
`share.coordinator.state.topic.*`) and the call answers COORDINATOR_NOT_AVAILABLE.
Retriable answers (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION while the coordinator has not
heard of a new topic yet, a connection failure) are retried after `RETRY_BACKOFF_MS`,
doubling, up to `RETRY_MAX_BACKOFF_MS`, for at most `max_retry_ms` in total (a coordinator
failover: LeaderAndIsr, then the new leader loads); the last error is returned after that.
"""

from __future__ import annotations

import asyncio
import logging
import time

from coordinator.share import wire
from coordinator.share.persister import (
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateRequest,
    ReadStateResult,
    ReadStateSummaryRequest,
    ReadStateSummaryResult,
    WriteStateRequest,
)
from coordinator.share.share_coordinator import SHARE_GROUP_STATE_TOPIC
from protocol.errors import ErrorCode

__all__ = ["BrokerSharePersister"]

log = logging.getLogger(__name__)
E = ErrorCode
RETRY_BACKOFF_MS = 50
RETRY_MAX_BACKOFF_MS = 1000
RETRIABLE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
                       E.COORDINATOR_LOAD_IN_PROGRESS, E.REQUEST_TIMED_OUT,
                       # a topic created a moment ago: the coordinator's metadata lags
                       E.UNKNOWN_TOPIC_OR_PARTITION})
#: how often a missing state topic may be (re)requested from the controller (s)
CREATE_INTERVAL_S = 2.0


class BrokerSharePersister:
    """See the module docstring. `links` is a `BrokerLinks` on the inter-broker listener."""

    def __init__(self, services, coordinator, links, max_retry_ms: int = 8000) -> None:
        self.services = services
        self.coordinator = coordinator  # the local ShareCoordinator
        self.links = links
        self.max_retry_ms = max_retry_ms
        self._created_at = 0.0
        self.rpcs = 0
        self.local_calls = 0

    # ------------------------------------------------------------------ Persister
    async def read_state(self, request: ReadStateRequest) -> ReadStateResult:
        return await self._call(request, "read_state", ReadStateResult,
                                lambda rs: wire.read_rpc(rs[0].group_id, rs), wire.READ,
                                wire.read_results)

    async def write_state(self, request: WriteStateRequest) -> int:
        return await self._call(request, "write_state", _code,
                                lambda rs: wire.write_rpc(rs[0].group_id, rs), wire.WRITE,
                                _codes)

    async def read_state_summary(self, request: ReadStateSummaryRequest
                                 ) -> ReadStateSummaryResult:
        return await self._call(request, "read_state_summary", ReadStateSummaryResult,
                                lambda rs: wire.summary_rpc(rs[0].group_id, rs),
                                wire.READ_SUMMARY, wire.summary_results)

    async def initialize_state(self, request: InitializeStateRequest) -> int:
        return await self._call(request, "initialize_state", _code,
                                lambda rs: wire.initialize_rpc(rs[0].group_id, rs),
                                wire.INITIALIZE, _codes)

    async def delete_state(self, request: DeleteStateRequest) -> int:
        return await self._call(request, "delete_state", _code,
                                lambda rs: wire.delete_rpc(rs[0].group_id, rs), wire.DELETE,
                                _codes)

    # ------------------------------------------------------------------ plumbing
    async def _call(self, request, op: str, fail, build, api_key: int, parse):
        deadline = time.monotonic() + self.max_retry_ms / 1000
        delay = RETRY_BACKOFF_MS
        while True:
            result = await self._once(request, op, fail, build, api_key, parse)
            code = _error_of(result)
            if code not in RETRIABLE or time.monotonic() + delay / 1000 > deadline:
                return result
            await asyncio.sleep(delay / 1000)
            delay = min(delay * 2, RETRY_MAX_BACKOFF_MS)

    async def _once(self, request, op: str, fail, build, api_key: int, parse):
        leader = await self._coordinator_broker(request)
        if leader is None:
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        if leader == self.services.broker_id:
            self.local_calls += 1
            return await getattr(self.coordinator, op)(request)
        self.rpcs += 1
        try:
            resp = await self.links.request(leader, api_key, build([request]))
        except (ConnectionError, OSError, TimeoutError) as e:
            log.debug("share state %s to broker %d failed: %r", op, leader, e)
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        found = parse(resp).get((request.topic_id, request.partition))
        return fail(E.UNKNOWN_SERVER_ERROR) if found is None else found

    async def _coordinator_broker(self, request) -> int | None:
        cache = self.services.metadata_cache
        p = self.coordinator.partition_for(request.group_id, request.topic_id, request.partition)
        state = cache.partition_state(SHARE_GROUP_STATE_TOPIC, p)
        if state is None:
            await self._ensure_topic()
            return None
        leader = state.leader
        if leader is None or leader < 0:
            return None
        return leader

    async def _ensure_topic(self) -> None:
        controller = self.services.controller
        now = time.monotonic()
        if controller is None or now - self._created_at < CREATE_INTERVAL_S:
            return
        self._created_at = now
        if self.services.metadata_cache.contains_topic(SHARE_GROUP_STATE_TOPIC):
            return
        from broker.handlers.metadata import internal_topic_spec
        spec = internal_topic_spec(SHARE_GROUP_STATE_TOPIC, self.services.config)
        try:
            results = await controller.auto_create_topics([spec])
        except Exception as e:  # noqa: BLE001 - retried at the next call
            log.warning("cannot create %s: %r", SHARE_GROUP_STATE_TOPIC, e)
            return
        for r in results:
            if r.error_code not in (E.NONE, E.TOPIC_ALREADY_EXISTS):
                log.warning("cannot create %s: %s %s", SHARE_GROUP_STATE_TOPIC,
                            E(r.error_code).name, r.error_message or "")


def _code(code: int) -> int:
    return code


def _codes(resp) -> dict:
    return {k: code for k, (code, _msg) in wire.partition_results(resp).items()}


def _error_of(result) -> int:
    if isinstance(result, int):
        return result
    return result.error_code
