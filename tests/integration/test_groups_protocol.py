"""Group and offset APIs on raw requests (our codec) against a live broker: exact error codes
and version differences of FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups."""

from __future__ import annotations

import time

import pytest

from protocol import api
from protocol.errors import ErrorCode as E
from tests.integration.raw_client import RawClient

FIND, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
COMMIT, FETCH, DESCRIBE, LIST, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 15, 16, 42, 47
CREATE_TOPICS = 19
BROKER_PROPS = {"group.min.session.timeout.ms": "1000", "offsets.topic.num.partitions": "7"}


def req(key):
    return api.API_KEYS[key].request_cls


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    from tests.integration.harness import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("groups_protocol"), BROKER_PROPS)
    b.start()
    yield b
    b.stop()


@pytest.fixture
def raw(gbroker):
    r = RawClient(gbroker, timeout=15.0, client_id="raw-groups")
    yield r
    r.close()


def wait_coordinator(raw: RawClient, group: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = raw.call(FIND, 3, key=group, key_type=0)
        if r.error_code == 0:
            return r
        assert r.error_code in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS)
        time.sleep(0.05)
    raise AssertionError("no coordinator")


def create_topic(raw: RawClient, name: str, partitions: int = 2) -> None:
    C = req(CREATE_TOPICS)
    r = raw.call(CREATE_TOPICS, 5, topics=[C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10000)
    assert r.topics[0].error_code in (0, E.TOPIC_ALREADY_EXISTS)


def join(raw, version, group, member_id="", instance=None, session=6000, protocols=None,
         protocol_type="consumer"):
    J = req(JOIN)
    protocols = protocols or [J.JoinGroupRequestProtocol(name="range", metadata=b"sub")]
    return raw.call(JOIN, version, group_id=group, session_timeout_ms=session,
                    rebalance_timeout_ms=10000, member_id=member_id, group_instance_id=instance,
                    protocol_type=protocol_type, protocols=protocols)


def sync(raw, version, group, generation, member_id, assignments=(), instance=None, **kw):
    S = req(SYNC)
    return raw.call(SYNC, version, group_id=group, generation_id=generation,
                    member_id=member_id, group_instance_id=instance,
                    assignments=[S.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                 for m, a in assignments], **kw)


def test_find_coordinator_versions(gbroker, raw):
    first = raw.call(FIND, 0, key="fc-group")
    assert first.error_code in (0, E.COORDINATOR_NOT_AVAILABLE)
    ok = wait_coordinator(raw, "fc-group")
    assert (ok.node_id, ok.host, ok.port) == (gbroker.broker_id, "127.0.0.1", gbroker.port)
    for v in (0, 1, 2, 3):
        r = raw.call(FIND, v, key="fc-group", key_type=0)
        assert (r.error_code, r.node_id, r.port) == (0, gbroker.broker_id, gbroker.port)
    r = raw.call(FIND, 4, key_type=0, coordinator_keys=["a", "b", ""])
    assert [(c.key, c.error_code, c.node_id) for c in r.coordinators] == \
        [("a", 0, gbroker.broker_id), ("b", 0, gbroker.broker_id), ("", 0, gbroker.broker_id)]
    r = raw.call(FIND, 6, key_type=1, coordinator_keys=["txn"])
    assert r.coordinators[0].error_code == E.COORDINATOR_NOT_AVAILABLE
    assert r.coordinators[0].node_id == -1
    r = raw.call(FIND, 2, key="x", key_type=9)
    assert r.error_code == E.INVALID_REQUEST
    # the internal topic was created with offsets.topic.num.partitions, compacted
    M = req(3)
    md = raw.call(3, 12, topics=[M.MetadataRequestTopic(name="__consumer_offsets")],
                  allow_auto_topic_creation=False)
    assert md.topics[0].is_internal and len(md.topics[0].partitions) == 7


def test_join_sync_heartbeat_leave_across_versions(raw):
    wait_coordinator(raw, "v0-group")
    # v0-v3: no MEMBER_ID_REQUIRED round
    j = join(raw, 0, "v0-group")
    assert (j.error_code, j.generation_id, j.leader) == (0, 1, j.member_id)
    assert j.protocol_name == "range" and [m.member_id for m in j.members] == [j.member_id]
    s = sync(raw, 0, "v0-group", 1, j.member_id, [(j.member_id, b"assign")])
    assert (s.error_code, bytes(s.assignment)) == (0, b"assign")
    assert raw.call(HEARTBEAT, 0, group_id="v0-group", generation_id=1,
                    member_id=j.member_id).error_code == 0
    assert raw.call(HEARTBEAT, 4, group_id="v0-group", generation_id=5,
                    member_id=j.member_id).error_code == E.ILLEGAL_GENERATION
    assert raw.call(HEARTBEAT, 2, group_id="v0-group", generation_id=1,
                    member_id="who").error_code == E.UNKNOWN_MEMBER_ID
    assert raw.call(LEAVE, 0, group_id="v0-group", member_id=j.member_id).error_code == 0
    assert raw.call(LEAVE, 1, group_id="v0-group", member_id="who").error_code == \
        E.UNKNOWN_MEMBER_ID

    # v4+: MEMBER_ID_REQUIRED with the id to use; v7 returns the protocol type
    first = join(raw, 7, "v7-group")
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("raw-groups-")
    j = join(raw, 7, "v7-group", member_id=first.member_id)
    assert (j.error_code, j.protocol_type, j.protocol_name) == (0, "consumer", "range")
    s = sync(raw, 5, "v7-group", j.generation_id, j.member_id, [(j.member_id, b"A")],
             protocol_type="consumer", protocol_name="roundrobin")
    assert s.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    s = sync(raw, 5, "v7-group", j.generation_id, j.member_id, [(j.member_id, b"A")],
             protocol_type="consumer", protocol_name="range")
    assert (s.error_code, s.protocol_type, s.protocol_name, bytes(s.assignment)) == \
        (0, "consumer", "range", b"A")
    assert join(raw, 5, "v7-group", session=100).error_code == E.INVALID_SESSION_TIMEOUT
    assert join(raw, 5, "").error_code == E.INVALID_GROUP_ID
    L = req(LEAVE)
    r = raw.call(LEAVE, 5, group_id="v7-group", members=[
        L.MemberIdentity(member_id=j.member_id), L.MemberIdentity(member_id="ghost")])
    assert r.error_code == 0
    assert [(m.member_id, m.error_code) for m in r.members] == \
        [(j.member_id, 0), ("ghost", E.UNKNOWN_MEMBER_ID)]


def test_static_member_rejoin_v9_skips_assignment(raw):
    wait_coordinator(raw, "static-raw")
    j = join(raw, 9, "static-raw", instance="inst")
    assert j.error_code == 0 and j.leader == j.member_id
    assert sync(raw, 5, "static-raw", 1, j.member_id, [(j.member_id, b"mine")],
                instance="inst").error_code == 0
    again = join(raw, 9, "static-raw", instance="inst")
    assert again.error_code == 0 and again.member_id != j.member_id
    assert (again.generation_id, again.skip_assignment, again.leader) == \
        (1, True, again.member_id)
    assert [(m.member_id, m.group_instance_id) for m in again.members] == \
        [(again.member_id, "inst")]
    s = sync(raw, 5, "static-raw", 1, again.member_id, instance="inst")
    assert (s.error_code, bytes(s.assignment)) == (0, b"mine")
    assert raw.call(HEARTBEAT, 4, group_id="static-raw", generation_id=1,
                    member_id=j.member_id, group_instance_id="inst").error_code == \
        E.FENCED_INSTANCE_ID
    L = req(LEAVE)
    r = raw.call(LEAVE, 4, group_id="static-raw",
                 members=[L.MemberIdentity(member_id="", group_instance_id="inst")])
    assert [(m.group_instance_id, m.error_code) for m in r.members] == [("inst", 0)]


def commit(raw, version, group, topic, offsets, generation=-1, member="", **kw):
    C = req(COMMIT)
    return raw.call(COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
                    member_id=member, topics=[C.OffsetCommitRequestTopic(name=topic, partitions=[
                        C.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                       committed_leader_epoch=3,
                                                       committed_metadata=m)
                        for p, o, m in offsets])], **kw)


def test_offset_commit_and_fetch_versions(raw):
    wait_coordinator(raw, "offs")
    wait_coordinator(raw, "offs-2")
    create_topic(raw, "offs-topic", 2)
    r = commit(raw, 0, "offs", "offs-topic", [(0, 10, "zero"), (1, 11, None)])
    assert [p.error_code for p in r.topics[0].partitions] == [0, 0]
    r = commit(raw, 8, "offs-2", "offs-topic", [(0, 20, "m" * 10)])
    assert r.topics[0].partitions[0].error_code == 0
    r = commit(raw, 2, "offs-2", "no-such-topic", [(0, 1, "")], retention_time_ms=60000)
    assert r.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    r = commit(raw, 5, "never-joined", "offs-topic", [(0, 1, "")], generation=3, member="m")
    assert r.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION

    F = req(FETCH)
    topics = [F.OffsetFetchRequestTopic(name="offs-topic", partition_indexes=[0, 1])]
    v1 = raw.call(FETCH, 1, group_id="offs", topics=topics)
    assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
            for p in v1.topics[0].partitions] == [(0, 10, "zero", 0), (1, 11, "", 0)]
    v5 = raw.call(FETCH, 5, group_id="offs", topics=topics)
    assert v5.error_code == 0 and v5.topics[0].partitions[0].committed_leader_epoch == -1
    every = raw.call(FETCH, 7, group_id="offs", topics=None, require_stable=True)
    assert {(t.name, p.partition_index) for t in every.topics for p in t.partitions} == \
        {("offs-topic", 0), ("offs-topic", 1)}
    G = F.OffsetFetchRequestGroup
    multi = raw.call(FETCH, 8, groups=[
        G(group_id="offs-2", topics=[F.OffsetFetchRequestTopics(name="offs-topic",
                                                                partition_indexes=[0])]),
        G(group_id="unknown-group", topics=[F.OffsetFetchRequestTopics(
            name="offs-topic", partition_indexes=[1])]),
        G(group_id="offs", topics=None)], require_stable=False)
    got = {g.group_id: [(t.name, p.partition_index, p.committed_offset, p.metadata,
                         p.committed_leader_epoch) for t in g.topics for p in t.partitions]
           for g in multi.groups}
    assert got["offs-2"] == [("offs-topic", 0, 20, "m" * 10, 3)]
    assert got["unknown-group"] == [("offs-topic", 1, -1, "", -1)]
    assert sorted(got["offs"])[0][:3] == ("offs-topic", 0, 10)

    # OffsetDelete on an Empty group, then the group is deletable
    D = req(OFFSET_DELETE)
    r = raw.call(OFFSET_DELETE, 0, group_id="offs", topics=[D.OffsetDeleteRequestTopic(
        name="offs-topic", partitions=[D.OffsetDeleteRequestPartition(partition_index=0)])])
    assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
    v1 = raw.call(FETCH, 1, group_id="offs", topics=topics)
    assert [p.committed_offset for p in v1.topics[0].partitions] == [-1, 11]
    r = raw.call(OFFSET_DELETE, 0, group_id="no-group", topics=[])
    assert r.error_code == E.GROUP_ID_NOT_FOUND


def test_list_describe_delete_groups(raw):
    wait_coordinator(raw, "adm-stable")
    wait_coordinator(raw, "adm-empty")
    j = join(raw, 5, "adm-stable", member_id="")
    j = join(raw, 5, "adm-stable", member_id=j.member_id)
    assert sync(raw, 4, "adm-stable", j.generation_id, j.member_id,
                [(j.member_id, b"asg")]).error_code == 0
    create_topic(raw, "adm-topic", 1)
    assert commit(raw, 3, "adm-empty", "adm-topic", [(0, 5, "")]).topics[0] \
        .partitions[0].error_code == 0

    listed = raw.call(LIST, 0)
    names = {g.group_id: g.protocol_type for g in listed.groups}
    assert names["adm-stable"] == "consumer" and names["adm-empty"] == ""
    stable = raw.call(LIST, 4, states_filter=["stable"])
    assert "adm-stable" in {g.group_id for g in stable.groups}
    assert all(g.group_state == "Stable" for g in stable.groups)
    empty = raw.call(LIST, 5, states_filter=["Empty"], types_filter=["classic"])
    assert "adm-empty" in {g.group_id for g in empty.groups}
    assert all(g.group_type == "classic" for g in empty.groups)
    assert raw.call(LIST, 5, types_filter=["consumer"]).groups == []

    d = raw.call(DESCRIBE, 5, groups=["adm-stable", "adm-empty", "adm-none"],
                 include_authorized_operations=True)
    by = {g.group_id: g for g in d.groups}
    s = by["adm-stable"]
    assert (s.error_code, s.group_state, s.protocol_type, s.protocol_data) == \
        (0, "Stable", "consumer", "range")
    assert [(m.member_id, bytes(m.member_metadata), bytes(m.member_assignment), m.client_id,
             m.client_host) for m in s.members] == \
        [(j.member_id, b"sub", b"asg", "raw-groups", "/127.0.0.1")]
    assert s.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    assert by["adm-empty"].group_state == "Empty" and by["adm-empty"].members == []
    assert by["adm-none"].group_state == "Dead" and by["adm-none"].error_code == 0
    assert raw.call(DESCRIBE, 0, groups=["adm-stable"]).groups[0].authorized_operations == \
        -2147483648

    r = raw.call(DELETE_GROUPS, 2, groups_names=["adm-stable", "adm-empty", "adm-none"])
    assert {x.group_id: x.error_code for x in r.results} == {
        "adm-stable": E.NON_EMPTY_GROUP, "adm-empty": 0, "adm-none": E.GROUP_ID_NOT_FOUND}
    assert "adm-empty" not in {g.group_id for g in raw.call(LIST, 3).groups}


def test_offsets_topic_replication_factor_is_enforced(broker_factory):
    """KIP-115: with offsets.topic.replication.factor above the live brokers the internal
    topic is not created and FindCoordinator keeps answering COORDINATOR_NOT_AVAILABLE."""
    b = broker_factory({"offsets.topic.replication.factor": "3"})
    r = RawClient(b)
    try:
        for _ in range(10):
            assert raw_find(r).error_code == E.COORDINATOR_NOT_AVAILABLE
            time.sleep(0.05)
        M = req(3)
        md = r.call(3, 12, topics=[M.MetadataRequestTopic(name="__consumer_offsets")],
                    allow_auto_topic_creation=False)
        assert md.topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        r.close()
    assert "INVALID_REPLICATION_FACTOR" in b.log_text()


def raw_find(raw: RawClient):
    return raw.call(FIND, 3, key="rf-group", key_type=0)


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout(raw):
    """Kafka 3.0+ (KAFKA-13054): a member that joins but sends no SyncGroup within the
    rebalance timeout is removed even though it heartbeats."""
    wait_coordinator(raw, "no-sync-group")
    J = req(JOIN)
    j = raw.call(JOIN, 1, group_id="no-sync-group", session_timeout_ms=6000,
                 rebalance_timeout_ms=1500, member_id="", protocol_type="consumer",
                 protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"sub")])
    assert j.error_code == 0 and j.leader == j.member_id
    joined = time.monotonic()
    codes = []
    while time.monotonic() - joined < 4.0:
        codes.append(raw.call(HEARTBEAT, 1, group_id="no-sync-group", generation_id=1,
                              member_id=j.member_id).error_code)
        if codes[-1] != 0:
            break
        time.sleep(0.2)
    assert codes[0] == 0 and codes[-1] == E.UNKNOWN_MEMBER_ID
    assert 1.2 < time.monotonic() - joined < 4.0
    d = raw.call(DESCRIBE, 0, groups=["no-sync-group"])
    assert d.groups[0].group_state == "Empty" and d.groups[0].members == []
