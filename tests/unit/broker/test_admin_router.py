"""client.admin.AdminRouter (issue 27 point 5): requests go where Kafka's AdminClient sends
them and are resent on NOT_CONTROLLER, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS and
leader changes. A scripted client stands in for the brokers: it records (api key, node) of
every request and answers from a script."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from client.admin import COORDINATOR_TRANSACTION, AdminRouter
from client.connection import ToolError

METADATA, FIND_COORDINATOR, CREATE_TOPICS, OFFSET_FETCH, LIST_OFFSETS = 3, 10, 19, 9, 2


class ScriptedClient:
    timeout = 2.0

    def __init__(self, controllers, leaders, coordinators=(1,)):
        self.controllers = list(controllers)  # controller id per Metadata answer
        self.leaders = list(leaders)  # {(t, p): leader} per Metadata answer
        self.coordinators = list(coordinators)
        self.sent: list[tuple[int, int | None]] = []
        self.answers: dict[tuple[int, int | None], list] = {}

    def version_for(self, api_key, max_version=None):
        return 3 if api_key == FIND_COORDINATOR else 7

    def reset_connection(self, node):
        pass

    def controller_node(self):
        return self.controllers.pop(0) if len(self.controllers) > 1 else self.controllers[0]

    def metadata(self, topics=None):
        leaders = self.leaders.pop(0) if len(self.leaders) > 1 else self.leaders[0]
        topics_out = {}
        for (t, p), leader in leaders.items():
            topics_out.setdefault(t, []).append(NS(partition_index=p, leader_id=leader))
        return NS(brokers=[NS(node_id=i) for i in (1, 2, 3)], topics=[
            NS(name=t, error_code=0, partitions=ps) for t, ps in topics_out.items()])

    def request(self, api_key, body, version=None, node=None, timeout=None):
        self.sent.append((api_key, node))
        if api_key == FIND_COORDINATOR:
            c = self.coordinators.pop(0) if len(self.coordinators) > 1 else self.coordinators[0]
            return NS(error_code=0, node_id=c)
        queue = self.answers.get((api_key, node))
        if queue:
            return queue.pop(0)
        raise AssertionError(f"unexpected request {api_key} to {node}")


def test_controller_moves_between_lookup_and_request():
    c = ScriptedClient(controllers=[1, 2], leaders=[{}])
    not_controller = NS(topics=[NS(error_code=41)])
    c.answers = {(CREATE_TOPICS, 1): [not_controller], (CREATE_TOPICS, 2): [
        NS(topics=[NS(error_code=0)])]}
    resp = AdminRouter(c, backoff_s=0).controller(
        CREATE_TOPICS, {}, errors=lambda r: [t.error_code for t in r.topics])
    assert resp.topics[0].error_code == 0
    assert c.sent == [(CREATE_TOPICS, 1), (CREATE_TOPICS, 2)]


def test_not_controller_until_the_timeout_returns_the_last_answer():
    c = ScriptedClient(controllers=[1], leaders=[{}])
    c.answers = {(CREATE_TOPICS, 1): [NS(error_code=41)] * 1000}
    resp = AdminRouter(c, timeout_s=0.05, backoff_s=0.01).controller(CREATE_TOPICS, {})
    assert resp.error_code == 41 and len(c.sent) >= 2


def test_coordinator_moves_and_loads():
    c = ScriptedClient(controllers=[1], leaders=[{}], coordinators=[1, 3])
    c.answers = {(OFFSET_FETCH, 1): [NS(error_code=16)],  # NOT_COORDINATOR: find it again
                 (OFFSET_FETCH, 3): [NS(error_code=14), NS(error_code=0)]}  # loading: again
    router = AdminRouter(c, backoff_s=0)
    assert router.coordinator("g", OFFSET_FETCH, {}).error_code == 0
    assert [n for k, n in c.sent if k == OFFSET_FETCH] == [1, 3, 3]
    assert [k for k, _ in c.sent].count(FIND_COORDINATOR) == 2
    # a transactional id is looked up with its own key type (cached separately)
    c.answers[(OFFSET_FETCH, 3)] = [NS(error_code=0)]
    router.coordinator("g", OFFSET_FETCH, {}, key_type=COORDINATOR_TRANSACTION)
    assert [k for k, _ in c.sent].count(FIND_COORDINATOR) == 3


def _offsets(resp):
    for t, p, code in resp.items:
        yield (t, p), code, 42


def test_partitions_follow_their_new_leader():
    c = ScriptedClient(controllers=[1], leaders=[{("t", 0): 1, ("t", 1): 2},
                                                 {("t", 0): 3, ("t", 1): 2}])
    c.answers = {(LIST_OFFSETS, 1): [NS(items=[("t", 0, 6)])],  # NOT_LEADER_OR_FOLLOWER
                 (LIST_OFFSETS, 2): [NS(items=[("t", 1, 0)])],
                 (LIST_OFFSETS, 3): [NS(items=[("t", 0, 0)])]}
    got = AdminRouter(c, backoff_s=0).to_leaders(LIST_OFFSETS, [("t", 0), ("t", 1)],
                                                 lambda tps: tps, _offsets)
    assert got == {("t", 0): (0, 42), ("t", 1): (0, 42)}
    assert [n for k, n in c.sent if k == LIST_OFFSETS] == [1, 2, 3]


def test_unknown_partition_fails_at_once_and_leaderless_waits():
    c = ScriptedClient(controllers=[1], leaders=[{("t", 0): -1}, {("t", 0): 2}])
    c.answers = {(LIST_OFFSETS, 2): [NS(items=[("t", 0, 0)])]}
    got = AdminRouter(c, backoff_s=0).to_leaders(LIST_OFFSETS, [("t", 0), ("t", 9)],
                                                 lambda tps: tps, _offsets)
    assert got == {("t", 9): (3, None), ("t", 0): (0, 42)}


def test_no_controller_known():
    c = ScriptedClient(controllers=[None], leaders=[{}])
    with pytest.raises(ToolError, match="no controller"):
        AdminRouter(c, timeout_s=0.05, backoff_s=0.01).controller(CREATE_TOPICS, {})
