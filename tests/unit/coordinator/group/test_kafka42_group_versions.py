"""The Kafka 4.2 versions of the group APIs, through the handlers and a real
GroupCoordinator (MockTimer, in-memory store): OffsetCommit / OffsetFetch v10 name topics
by id (UNKNOWN_TOPIC_ID for an unknown one), DescribeGroups v6 answers GROUP_ID_NOT_FOUND
for an unknown group (KIP-1043)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.handlers import group_admin, offsets
from protocol import api
from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsRequest, OffsetCommitRequest, OffsetFetchRequest
from tests.unit.coordinator.group.coordinator_helpers import Harness

T_ID = uuid.UUID(int=0xABC)
UNKNOWN = uuid.UUID(int=0xDEF)


class Cache:
    def topic_name(self, topic_id):
        return "t" if topic_id == T_ID else None

    def topic_id(self, name):
        return T_ID if name == "t" else None

    def contains_partition(self, topic, partition):
        return topic == "t" and partition in (0, 1)


def ctx(coordinator, version):
    return SimpleNamespace(api_version=version, broker=SimpleNamespace(
        group_coordinator=coordinator, metadata_cache=Cache()))


def over_the_wire(api_key, version, request):
    """What the broker decodes from a client at `version` (names are not sent in v10)."""
    return api.decode_request(api_key, version, api.encode_request(request, version))


async def commit_v10(coordinator):
    req = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="",
                              topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=T_ID, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0,
                                                             committed_offset=42)]),
        OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=UNKNOWN, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0,
                                                             committed_offset=7)])])
    return await offsets.handle_offset_commit(ctx(coordinator, 10),
                                              over_the_wire(8, 10, req))


async def test_offset_commit_v10_by_topic_id():
    h = Harness()
    coordinator = await h.start()
    resp = await commit_v10(coordinator)
    got = {t.topic_id: [p.error_code for p in t.partitions] for t in resp.topics}
    assert got == {T_ID: [ErrorCode.NONE], UNKNOWN: [ErrorCode.UNKNOWN_TOPIC_ID]}
    error, found = coordinator.handle_fetch_offsets("g", [("t", 0)])
    assert error == ErrorCode.NONE and found[("t", 0)][0].offset == 42
    # the response encodes the ids (v10) and decodes back
    wire = api.decode_response(8, 10, api.encode_response(resp, 10))
    assert {t.topic_id for t in wire.topics} == {T_ID, UNKNOWN}


async def test_offset_fetch_v10_by_topic_id():
    h = Harness()
    coordinator = await h.start()
    await commit_v10(coordinator)
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    req = OffsetFetchRequest(groups=[G(group_id="g", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopics(topic_id=T_ID, partition_indexes=[0, 1]),
        OffsetFetchRequest.OffsetFetchRequestTopics(topic_id=UNKNOWN, partition_indexes=[0])]),
        G(group_id="g", topics=None)])
    resp = offsets.handle_offset_fetch(ctx(coordinator, 10), over_the_wire(9, 10, req))
    resp = api.decode_response(9, 10, api.encode_response(resp, 10))
    named, everything = resp.groups
    rows = {(t.topic_id, p.partition_index): (p.committed_offset, p.error_code)
            for t in named.topics for p in t.partitions}
    assert rows == {(T_ID, 0): (42, 0), (T_ID, 1): (-1, 0),
                    (UNKNOWN, 0): (-1, ErrorCode.UNKNOWN_TOPIC_ID)}
    assert [(t.topic_id, [p.committed_offset for p in t.partitions])
            for t in everything.topics] == [(T_ID, [42])]
    # v9 still answers by name
    v9 = offsets.handle_offset_fetch(ctx(coordinator, 9), OffsetFetchRequest(groups=[
        G(group_id="g", topics=None)]))
    assert [t.name for t in v9.groups[0].topics] == ["t"]


async def test_describe_groups_v6_unknown_group():
    h = Harness()
    coordinator = await h.start()
    req = DescribeGroupsRequest(groups=["nope"])
    v6 = group_admin.handle_describe_groups(ctx(coordinator, 6), req).groups[0]
    assert (v6.error_code, v6.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                 "Group nope not found.")
    v5 = group_admin.handle_describe_groups(ctx(coordinator, 5), req).groups[0]
    assert (v5.error_code, v5.group_state) == (ErrorCode.NONE, "Dead")
