"""ChangeNotificationListener (issue 27 point 1): the one path for ACL, config and
delegation-token change notifications.

``OneShotStore`` behaves like ZooKeeper: a children watch fires once and is armed again
only by the next ``get_children`` of the path. The old ACL listener dropped a watch that fired
while a pass was running, so nothing re-armed it and every later change was missed; these
tests fail on that behaviour."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.security.authorizer import AclAuthorizer
from broker.security.principal import KafkaPrincipal
from common.acl import (
    AclBinding,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from controller.change_listener import ChangeNotificationListener
from controller.znode_store import MemoryZNodeStore

PATH, PREFIX = "/changes", "change_"


class OneShotStore(MemoryZNodeStore):
    """ZooKeeper's watch semantics over the in-memory store; reads take a round trip (other
    tasks run meanwhile); ``fail_reads`` makes the next n reads raise (a lost connection)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: set[str] = set()
        self.fail_reads = 0

    async def get(self, path):
        await asyncio.sleep(0.001)  # a round trip: other work runs meanwhile
        return await super().get(path)

    async def get_children(self, path):
        await asyncio.sleep(0.001)
        if self.fail_reads:
            self.fail_reads -= 1
            raise OSError("ConnectionLoss")
        if path in self.watchers:
            self.armed.add(path)
        return await super().get_children(path)

    def _notify(self, parent: str) -> None:
        if parent in self.armed:
            self.armed.discard(parent)
            super()._notify(parent)


async def settle(listener: ChangeNotificationListener) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
        await listener.wait_idle()


async def test_change_during_a_pass_is_not_dropped():
    store = OneShotStore()
    seen: list[bytes] = []
    gate = asyncio.Event()

    async def handler(path, data):
        await gate.wait()  # the first pass is still running when the next change arrives
        seen.append(data)

    listener = ChangeNotificationListener(store, PATH, PREFIX, handler)
    await listener.start()
    await store.create(f"{PATH}/{PREFIX}", b"a", sequential=True)
    await asyncio.sleep(0.01)  # the pass is parked in the handler
    await store.create(f"{PATH}/{PREFIX}", b"b", sequential=True)
    gate.set()
    await settle(listener)
    assert seen == [b"a", b"b"]
    # and the watch is armed again: a later change still arrives
    await store.create(f"{PATH}/{PREFIX}", b"c", sequential=True)
    await settle(listener)
    assert seen == [b"a", b"b", b"c"]
    await listener.shutdown()


async def test_burst_of_concurrent_changes():
    store = OneShotStore()
    seen: list[bytes] = []

    async def handler(path, data):
        await asyncio.sleep(0.001)
        seen.append(data)

    listener = ChangeNotificationListener(store, PATH, PREFIX, handler)
    await listener.start()
    for round_ in range(3):
        await asyncio.gather(*(store.create(f"{PATH}/{PREFIX}", f"{round_}-{i}".encode(),
                                            sequential=True) for i in range(10)))
        await asyncio.sleep(0.02)
    await settle(listener)
    assert seen == [f"{r}-{i}".encode() for r in range(3) for i in range(10)]
    assert listener.processed == 30


async def test_store_failure_is_retried_not_skipped(caplog):
    store = OneShotStore()
    seen: list[bytes] = []

    async def handler(path, data):
        seen.append(data)

    listener = ChangeNotificationListener(store, PATH, PREFIX, handler)
    await listener.start()
    store.fail_reads = 2
    await store.create(f"{PATH}/{PREFIX}", b"x", sequential=True)
    for _ in range(50):
        await asyncio.sleep(0.05)
        if seen:
            break
    assert seen == [b"x"]
    assert "Error while processing notification change for path = /changes" in caplog.text
    await listener.shutdown()


async def test_existing_notifications_and_expiry():
    now = [1_000_000]
    store = OneShotStore()
    for v in (b"old1", b"old2"):
        await store.create(f"{PATH}/{PREFIX}", v, sequential=True)
    seen: list[bytes] = []

    async def handler(path, data):
        seen.append(data)

    skipping = ChangeNotificationListener(store, PATH, PREFIX, handler, clock_ms=lambda: now[0])
    await skipping.start(skip_existing=True)
    assert seen == [] and skipping.last_executed_change == 1
    processing = ChangeNotificationListener(OneShotStore(), PATH, PREFIX, handler)
    processing.store.nodes.update(store.nodes)
    await processing.start()
    assert seen == [b"old1", b"old2"]
    # first seen at 1_000_000: purged once 15 minutes have passed, at the next pass
    now[0] += 15 * 60 * 1000 + 1
    await store.create(f"{PATH}/{PREFIX}", b"new", sequential=True)
    await settle(skipping)
    assert await store.get_children(PATH) == [f"{PREFIX}0000000002"]
    await skipping.shutdown()


@pytest.mark.parametrize("adds", [10, 30])
async def test_acl_authorizers_follow_concurrent_changes(adds):
    """Two brokers' authorizers over one ZooKeeper-like store: ``adds`` concurrent ACL
    additions through one of them, then a revoke; the other applies every one."""
    store = OneShotStore()
    one, two = AclAuthorizer(), AclAuthorizer()
    await one.start(store)
    await two.start(store)

    def binding(i: int) -> AclBinding:
        return AclBinding(ResourcePattern(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL),
                          AclEntry("User:alice", "*", AclOperation.WRITE,
                                   AclPermissionType.ALLOW))

    await asyncio.gather(*(one.create_acls([binding(i)]) for i in range(adds)))

    alice = SimpleNamespace(principal=KafkaPrincipal("User", "alice"), session=None,
                            client_address=("127.0.0.1", 5555),
                            header=SimpleNamespace(api_key=0))

    async def all_allowed(auth, expected: bool) -> bool:
        for _ in range(200):
            got = [auth.authorize(alice, AclOperation.WRITE, ResourceType.TOPIC, f"t{i}",
                                  log_if_denied=False) for i in range(adds)]
            if all(g is expected for g in got):
                return True
            await asyncio.sleep(0.01)
        return False

    assert await all_allowed(two, True)
    await asyncio.gather(*(one.delete_acls([_filter(i)]) for i in range(adds)))
    assert await all_allowed(two, False)
    await one.shutdown()
    await two.shutdown()


def _filter(i: int):
    from common.acl import AclBindingFilter

    return AclBindingFilter(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)
