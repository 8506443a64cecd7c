"""Where each admin request goes, and what is retried: Kafka's AdminClient routing on
:class:`client.connection.KafkaClient`, the one layer every ``josef`` tool sends through.

Routing (Kafka's ``KafkaAdminClient`` node providers):

* :meth:`AdminRouter.controller` - the active controller (CreateTopics, DeleteTopics,
  CreatePartitions, ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments,
  UpdateFeatures). NOT_CONTROLLER (41), at the top level or for any item, and a controller
  that cannot be reached make it look the controller up again (Metadata) and resend.
* :meth:`AdminRouter.coordinator` - the group or transaction coordinator of a key
  (FindCoordinator; DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups,
  ConsumerGroupDescribe, DescribeTransactions). NOT_COORDINATOR (16) and
  COORDINATOR_NOT_AVAILABLE (15) find the coordinator again; COORDINATOR_LOAD_IN_PROGRESS
  (14) asks the same one again.
* :meth:`AdminRouter.to_leaders` - each partition's leader (ListOffsets, DeleteRecords,
  DescribeProducers, WriteTxnMarkers, Produce, AlterReplicaLogDirs). Partitions without a
  leader in Metadata, or answered NOT_LEADER_OR_FOLLOWER (6), LEADER_NOT_AVAILABLE (5),
  FENCED_LEADER_EPOCH (74), REPLICA_NOT_AVAILABLE (9) or UNKNOWN_TOPIC_OR_PARTITION (3, the
  leader has not heard of its leadership yet) are resent to their new leader; a partition
  Metadata does not know fails at once.
* :meth:`AdminRouter.broker` - one broker (BROKER config resources, DescribeLogDirs);
  :meth:`AdminRouter.each_broker` - every live broker (ListGroups, ListTransactions);
  :meth:`AdminRouter.any` - any broker (Kafka's least loaded node: the bootstrap
  connection; DescribeConfigs of topics, ACLs, quotas, SCRAM, Metadata).

Retries wait ``backoff_s`` (Kafka's ``retry.backoff.ms``, 100 ms) and stop at ``timeout_s``
after the call started (Kafka's ``default.api.timeout.ms``; default the client's socket
timeout); the last answer is then returned as it is (its error reaches the tool). Tools
never pass ``node=`` themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from client.connection import KafkaClient, ToolError
from client.metadata import check_error

__all__ = ["AdminRouter", "COORDINATOR_GROUP", "COORDINATOR_TRANSACTION"]

NOT_CONTROLLER = 41
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS = 16, 15, 14
REFIND_COORDINATOR = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE})
RETRY_LEADER = frozenset({6, 5, 74, 9, 3})
COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1
FIND_COORDINATOR, METADATA = 10, 3

Codes = Callable[[Any], Iterable[int]]


def top_level(resp) -> list[int]:
    """The response's top-level error code (the default ``errors`` of a call)."""
    return [getattr(resp, "error_code", 0) or 0]


class AdminRouter:
    def __init__(self, client: KafkaClient, timeout_s: float | None = None,
                 backoff_s: float = 0.1) -> None:
        self.client = client
        self.timeout_s = client.timeout if timeout_s is None else timeout_s
        self.backoff_s = backoff_s
        self._coordinators: dict[tuple[int, str], int] = {}

    # ---- plain routes ------------------------------------------------------------------
    def any(self, api_key: int, body, version: int | None = None):
        return self.client.request(api_key, body, version=version)

    def broker(self, node: int, api_key: int, body, version: int | None = None,
               timeout: float | None = None):
        """Send to broker ``node``; ``timeout`` (seconds) bounds this round trip only."""
        return self.client.request(api_key, body, version=version, node=node, timeout=timeout)

    def each_broker(self, api_key: int, body, version: int | None = None
                    ) -> dict[int, Any]:
        """{broker id: response or the ToolError it failed with} for every live broker."""
        out: dict[int, Any] = {}
        for b in sorted(self.client.metadata([]).brokers, key=lambda b: b.node_id):
            try:
                out[b.node_id] = self.broker(b.node_id, api_key, body, version)
            except ToolError as e:
                out[b.node_id] = e
        return out

    # ---- the controller ----------------------------------------------------------------
    def controller_id(self) -> int:
        """The active controller (Metadata), waiting while none is known."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            node = self.client.controller_node()
            if node is not None:
                return node
            if time.monotonic() >= deadline:
                raise ToolError("no controller is known to the cluster (Metadata names none)")
            time.sleep(self.backoff_s)

    def controller(self, api_key: int, body, version: int | None = None,
                   errors: Codes = top_level):
        """Send to the controller; NOT_CONTROLLER (``errors(resp)``, default the top-level
        code) or an unreachable controller: look it up again and resend."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            node = self.controller_id()
            try:
                resp = self.client.request(api_key, body, version=version, node=node)
            except ToolError:
                if time.monotonic() >= deadline:
                    raise
                self.client.reset_connection(node)
                time.sleep(self.backoff_s)
                continue
            if NOT_CONTROLLER not in set(errors(resp)) or time.monotonic() >= deadline:
                return resp
            time.sleep(self.backoff_s)

    # ---- coordinators ------------------------------------------------------------------
    def find_coordinator(self, key: str, key_type: int = COORDINATOR_GROUP) -> int:
        """The coordinator of a group (key type 0) or transactional id (1); retried while
        the coordinator is not available (its internal topic being created or loaded)."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            return cached
        client = self.client
        version = client.version_for(FIND_COORDINATOR, max_version=3)
        if key_type != COORDINATOR_GROUP and version < 1:
            raise ToolError("the broker's FindCoordinator is too old for transactions")
        body = {"key": key}
        if version >= 1:
            body["key_type"] = key_type
        what = "group" if key_type == COORDINATOR_GROUP else "transactional id"
        deadline = time.monotonic() + self.timeout_s
        while True:
            resp = client.request(FIND_COORDINATOR, body, version=version)
            if resp.error_code not in REFIND_COORDINATOR or time.monotonic() >= deadline:
                break
            time.sleep(self.backoff_s)
        check_error(resp.error_code, getattr(resp, "error_message", None),
                    f"cannot find the coordinator of {what} {key}")
        client.metadata([])  # the coordinator's address
        self._coordinators[(key_type, key)] = resp.node_id
        return resp.node_id

    def coordinator(self, key: str, api_key: int, body, *, key_type: int = COORDINATOR_GROUP,
                    version: int | None = None, errors: Codes = top_level):
        """Send to the coordinator of ``key``; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE
        find it again, COORDINATOR_LOAD_IN_PROGRESS asks it again."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            node = self.find_coordinator(key, key_type)
            try:
                resp = self.client.request(api_key, body, version=version, node=node)
            except ToolError:
                self._coordinators.pop((key_type, key), None)
                if time.monotonic() >= deadline:
                    raise
                self.client.reset_connection(node)
                time.sleep(self.backoff_s)
                continue
            codes = set(errors(resp))
            if time.monotonic() >= deadline:
                return resp
            if codes & REFIND_COORDINATOR:
                self._coordinators.pop((key_type, key), None)
            elif COORDINATOR_LOAD_IN_PROGRESS not in codes:
                return resp
            time.sleep(self.backoff_s)

    # ---- partition leaders -------------------------------------------------------------
    def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> leader id (-1: none right now) of the topics Metadata
        knows; a topic it does not know (or that is being created) is left out."""
        md = self.client.metadata(sorted(set(topics)))
        out = {}
        for t in md.topics:
            if t.error_code and t.error_code not in (5, 3):
                check_error(t.error_code, None, f"topic {t.name}")
            for p in t.partitions:
                out[(t.name, p.partition_index)] = p.leader_id
        return out

    def to_leaders(self, api_key: int, partitions: Iterable[tuple[str, int]],
                   build: Callable[[list[tuple[str, int]]], Any],
                   results: Callable[[Any], Iterable[tuple[tuple[str, int], int, Any]]],
                   version: int | None = None, leaders: dict | None = None
                   ) -> dict[tuple[str, int], tuple[int, Any]]:
        """Send each partition to its leader: ``build(partitions of one leader)`` makes the
        request body, ``results(resp)`` yields ``((topic, partition), error code, item)``.
        Partitions with a leader-change error (or no leader yet) are resent to their new
        leader until the timeout. Returns {(topic, partition): (error code, item)}; a
        partition Metadata does not know is UNKNOWN_TOPIC_OR_PARTITION (3) at once, one with
        no leader at the end LEADER_NOT_AVAILABLE (5). ``leaders``: a caller's cache of
        (topic, partition) -> leader, used for the first round and updated in place when
        Metadata is asked again (a producer's hot path asks no Metadata)."""
        pending = list(dict.fromkeys(partitions))
        out: dict[tuple[str, int], tuple[int, Any]] = {}
        deadline = time.monotonic() + self.timeout_s
        cached = leaders
        while pending:
            if cached is not None and all(tp in cached for tp in pending):
                current, cached = cached, None
            else:
                current = self.leaders([t for t, _ in pending])
                if leaders is not None:
                    leaders.update(current)
            by_leader: dict[int, list[tuple[str, int]]] = {}
            retry: list[tuple[str, int]] = []
            for tp in pending:
                leader = current.get(tp)
                if leader is None:  # no such topic or partition: not retried (Kafka)
                    out[tp] = (3, None)
                elif leader < 0:
                    retry.append(tp)
                else:
                    by_leader.setdefault(leader, []).append(tp)
            for leader, tps in sorted(by_leader.items()):
                try:
                    resp = self.client.request(api_key, build(tps), version=version,
                                               node=leader)
                except ToolError:
                    if time.monotonic() >= deadline:
                        raise
                    self.client.reset_connection(leader)
                    retry += tps
                    continue
                answered = set()
                for tp, code, item in results(resp):
                    answered.add(tp)
                    if code in RETRY_LEADER and time.monotonic() < deadline:
                        retry.append(tp)
                    else:
                        out[tp] = (code, item)
                for tp in tps:  # a leader that left a partition out of its answer
                    if tp not in answered and tp not in out:
                        out[tp] = (3, None)
            pending = [tp for tp in retry if tp not in out]
            if pending:
                if time.monotonic() >= deadline:
                    for tp in pending:
                        out[tp] = (5, None)
                    break
                time.sleep(self.backoff_s)
        return out
