"""ZkClient.multi's own serialization (controller/zk_multi_write.py): the bytes kazoo's
Transaction writes, and the results kazoo gives, against a real ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData, Transaction
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from controller.zk_client import CheckOp, CreateOp, DeleteOp, SetDataOp, ZkClient, ZnodeStat
from controller.zk_multi_write import (
    Multi,
    encode_acl,
    encode_check,
    encode_create,
    encode_delete,
    encode_set_data,
)
from tests.integration.cluster import ZooKeeperServer, zookeeper_available


def test_serialization_is_kazoos_transaction():
    acl = list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
    ours = Multi([
        encode_create("/a/é", b"x" * 300, encode_acl(acl), 3),
        encode_create("/b", b"", encode_acl(list(OPEN_ACL_UNSAFE)), 0),
        encode_set_data("/brokers/topics/t/partitions/0/state", b'{"leader":1}', 7),
        encode_set_data("/c", b"", -1),
        encode_delete("/d", 4),
        encode_check("/controller_epoch", 12),
    ])
    kazoos = Transaction([
        Create("/a/é", b"x" * 300, acl, 3), Create("/b", b"", list(OPEN_ACL_UNSAFE), 0),
        SetData("/brokers/topics/t/partitions/0/state", b'{"leader":1}', 7),
        SetData("/c", b"", -1), Delete("/d", 4), CheckVersion("/controller_epoch", 12)])
    assert ours.type == kazoos.type
    assert bytes(ours.serialize()) == bytes(kazoos.serialize())


@pytest.fixture(scope="module")
def zk_connect(tmp_path_factory):
    why = zookeeper_available()
    if why:
        pytest.skip(why)
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zk-multi")).start()
    try:
        yield zk.connect
    finally:
        zk.stop()


@pytest.mark.parametrize("secure", [False, True])
def test_multi_against_zookeeper(zk_connect, secure):
    async def main():
        zk = ZkClient(zk_connect + f"/multi-{secure}", session_timeout_ms=10000, secure=secure,
                      auth_data=[("digest", "u:p")] if secure else None)
        await zk.start()
        try:
            got = await zk.multi([CreateOp("/p", b"1"), CreateOp("/p/s-", b"", sequential=True),
                                  CreateOp("/e", b"eph", ephemeral=True),
                                  SetDataOp("/p", b"2", 0), CheckOp("/p", 1),
                                  CreateOp("/gone"), DeleteOp("/gone", 0)])
            assert got[0] == "/p" and got[1].startswith("/p/s-") and got[2] == "/e"
            assert isinstance(got[3], ZnodeStat) and got[3].version == 1
            assert got[4:] == [True, "/gone", True]
            assert (await zk.get_data("/p"))[0] == b"2"
            assert (await zk.get_data("/e"))[1].ephemeralOwner == zk.session_id
            assert await zk.exists("/gone") is None
            # a failed transaction: the failing op's error, ZooKeeper's codes for the others
            # (RolledBack before it, RuntimeInconsistency after), as kazoo's own gives them
            got = await zk.multi([SetDataOp("/p", b"3", 1), SetDataOp("/p", b"4", 99),
                                  CreateOp("/p")])
            assert [type(r) for r in got] == [RolledBackError, BadVersionError,
                                              RuntimeInconsistency]

            def kazoo_transaction():
                t = zk._kazoo.transaction()
                t.set_data("/p", b"3", 1)
                t.set_data("/p", b"4", 99)
                t.create("/p")
                return t.commit()
            theirs = await asyncio.get_running_loop().run_in_executor(None, kazoo_transaction)
            assert [type(r) for r in theirs] == [type(r) for r in got]
            assert (await zk.get_data("/p"))[0] == b"2"
            got = await zk.multi([CreateOp("/p")])
            assert isinstance(got[0], NodeExistsError)
            many = await zk.multi([CreateOp(f"/p/n{i}", b"v" * 100) for i in range(1000)])
            assert many == [f"/p/n{i}" for i in range(1000)]
        finally:
            await zk.close()
    asyncio.run(main())


def test_update_leader_and_isr_in_chunks(zk_connect, monkeypatch):
    """Conditional partition-state writes in fenced multis (several chunks in flight): new
    versions for the written ones, BADVERSION ones to retry, both in the order asked (a
    chunk with a stale version is replayed write by write); reads in chunks; a stale
    controller epoch version raises ControllerMovedError and writes nothing."""
    from controller import kafka_zk_client as kzc
    from controller import zk_data as zd
    monkeypatch.setattr(kzc, "BATCH", 7)
    monkeypatch.setattr(kzc, "READ_CHUNK", 6)

    async def main():
        zk = ZkClient(zk_connect + "/lai", session_timeout_ms=10000)
        await zk.start()
        try:
            kz = kzc.KafkaZkClient(zk)
            await kz.create_top_level_paths()
            await zk.create(zd.ControllerEpochZNode.path, b"1")
            tps = [(f"t{i % 3}", i) for i in range(40)]
            for t in ("t0", "t1", "t2"):
                await zk.create(zd.TopicZNode.path(t), b"{}")
            states = {tp: zd.LeaderIsrAndControllerEpoch(1, 0, (1, 2), 1) for tp in tps}
            assert set((await kz.create_partition_states(states, 0)).values()) == {None}
            stale = {tps[3], tps[20], tps[21]}
            for tp in stale:  # someone else wrote these: version 1
                await zk.set_data(zd.TopicPartitionStateZNode.path(*tp), b"{}")
            new = {tp: zd.LeaderIsrAndControllerEpoch(2, 1, (2,), 1, 0) for tp in reversed(tps)}
            result = await kz.update_leader_and_isr(new, 0)
            assert result.retry == [tp for tp in reversed(tps) if tp in stale]
            assert list(result.finished) == [tp for tp in reversed(tps) if tp not in stale]
            assert all(s.partition_epoch == 1 and s.leader == 2
                       for s in result.finished.values())
            got = await kz.get_partition_states([*tps, ("t0", 99)])  # one missing
            assert list(got) == [tp for tp in tps if tp not in stale]  # "{}": malformed
            assert got[tps[0]] == zd.LeaderIsrAndControllerEpoch(2, 1, (2,), 1, 1)
            with pytest.raises(kzc.ControllerMovedError):
                await kz.update_leader_and_isr({tps[0]: got[tps[0]], tps[1]: got[tps[1]]}, 5)
            assert (await kz.get_partition_states([tps[0]]))[tps[0]] == got[tps[0]]
        finally:
            await zk.close()
    asyncio.run(main())


def test_multi_read_against_zookeeper(zk_connect):
    """get_data_many / get_children_many (multiRead) give what single reads give; a
    missing znode is None."""
    async def main():
        zk = ZkClient(zk_connect + "/reads", session_timeout_ms=10000)
        await zk.start()
        try:
            await zk.multi([CreateOp("/r", b""), CreateOp("/r/a", b"x" * 70000),
                            CreateOp("/r/b", b"\xff\x00"), CreateOp("/r/a/c")])
            paths = ["/r", "/r/a", "/missing", "/r/b", "/r/a/c"]
            many = await zk.get_data_many(paths)
            assert many[2] is None
            for path, got in zip(paths, many, strict=True):
                one = await zk.get_data(path)
                assert (got and (got[0], got[1].version, got[1].czxid)) == \
                    (one and (one[0], one[1].version, one[1].czxid))
            kids = await zk.get_children_many(["/r", "/missing", "/r/b"])
            assert sorted(kids[0]) == ["a", "b"] and kids[1] is None and kids[2] == []
        finally:
            await zk.close()
    asyncio.run(main())
