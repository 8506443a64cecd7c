"""AclAuthorizer decisions (Kafka's AclAuthorizer rules), ACL management through the znode
store, change notifications between two authorizers sharing a store (two brokers), filters,
and the authorizer log."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace

import pytest

from broker.security.authorizer import AclAuthorizer
from broker.security.principal import KafkaPrincipal
from common.acl import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from controller.znode_store import MemoryZNodeStore

R, W, D, ALL = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
T = ResourceType.TOPIC
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def ctx(user: str, host: str = "10.0.0.1", api_key: int = 1):
    return SimpleNamespace(principal=KafkaPrincipal("User", user), session=None,
                           client_address=(host, 5555),
                           header=SimpleNamespace(api_key=api_key))


def binding(name, principal, op, perm=ALLOW, host="*", ptype=LIT, rtype=T):
    return AclBinding(ResourcePattern(rtype, name, ptype), AclEntry(principal, host, op, perm))


async def make(**kw) -> tuple[AclAuthorizer, MemoryZNodeStore]:
    store = MemoryZNodeStore()
    a = AclAuthorizer(**kw)
    await a.start(store)
    return a, store


async def test_decisions():
    a, _ = await make(super_users="User:root;User:ops")
    await a.create_acls([
        binding("orders", "User:alice", R),
        binding("orders", "User:alice", W, DENY, host="10.0.0.9"),
        binding("orders", "User:*", D),
        binding("logs-", "User:bob", W, ptype=PRE),
        binding("*", "User:carol", ALL),
        binding("*", "User:carol", R, DENY, ptype=LIT),
    ])
    assert a.authorize(ctx("alice"), R, T, "orders")
    assert a.authorize(ctx("alice"), D, T, "orders")  # implied by READ
    assert not a.authorize(ctx("alice"), W, T, "orders")
    assert a.authorize(ctx("root"), AclOperation.ALTER, T, "anything")  # super user
    assert a.authorize(ctx("bob"), W, T, "logs-2024")  # prefixed
    assert a.authorize(ctx("bob"), D, T, "logs-x")  # WRITE implies DESCRIBE
    assert not a.authorize(ctx("bob"), W, T, "log")
    assert a.authorize(ctx("carol"), W, T, "x")  # ALL on the wildcard
    assert not a.authorize(ctx("carol"), R, T, "x")  # DENY wins
    assert a.authorize(ctx("eve"), D, T, "orders")  # User:* DESCRIBE
    assert not a.authorize(ctx("eve"), R, T, "orders")
    assert not a.authorize(ctx("eve"), R, T, "no-acls")  # no ACL, no allow-everyone
    # a DENY for one host only
    await a.create_acls([binding("orders", "User:alice", R, DENY, host="10.0.0.9")])
    assert not a.authorize(ctx("alice", "10.0.0.9"), R, T, "orders")
    assert a.authorize(ctx("alice", "10.0.0.1"), R, T, "orders")


async def test_allow_everyone_if_no_acl_found():
    a, _ = await make(allow_everyone_if_no_acl_found=True)
    assert a.authorize(ctx("eve"), R, T, "free")
    await a.create_acls([binding("guarded", "User:alice", R)])
    assert not a.authorize(ctx("eve"), R, T, "guarded")  # ACLs exist: no default allow


async def test_authorize_by_resource_type():
    a, _ = await make()
    assert not a.authorize_by_resource_type(ctx("bob"), W, T)
    await a.create_acls([binding("logs-", "User:bob", W, ptype=PRE)])
    assert a.authorize_by_resource_type(ctx("bob"), W, T)
    await a.create_acls([binding("log", "User:bob", W, DENY, ptype=PRE)])  # dominates
    assert not a.authorize_by_resource_type(ctx("bob"), W, T)
    await a.create_acls([binding("other", "User:bob", W)])
    assert a.authorize_by_resource_type(ctx("bob"), W, T)
    await a.create_acls([binding("*", "User:bob", W, DENY)])
    assert not a.authorize_by_resource_type(ctx("bob"), W, T)


async def test_znodes_notifications_and_two_brokers():
    store = MemoryZNodeStore()
    one, two = AclAuthorizer(), AclAuthorizer()
    await one.start(store)
    await two.start(store)
    await one.create_acls([binding("t", "User:alice", R), binding("p-", "User:bob", W,
                                                                    ptype=PRE)])
    doc = json.loads(store.nodes["/kafka-acl/Topic/t"][0])
    assert doc == {"version": 1, "acls": [{"principal": "User:alice", "permissionType":
                                           "Allow", "operation": "Read", "host": "*"}]}
    assert "/kafka-acl-extended/prefixed/Topic/p-" in store.nodes
    changes = {p: d for p, (d, _) in store.nodes.items() if "acl_changes_" in p}
    assert b"Topic:t" in changes.values()
    assert any(json.loads(d) == {"version": 1, "resourceType": "Topic", "name": "p-",
                                 "patternType": "PREFIXED"}
               for p, d in changes.items() if "extended" in p)
    for _ in range(20):  # the other broker follows the notifications
        await asyncio.sleep(0)
    assert two.authorize(ctx("alice"), R, T, "t") and two.authorize(ctx("bob"), W, T, "p-1")
    # deleting through the second removes the znode and reaches the first
    flt = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, "User:alice", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    (deleted,) = await two.delete_acls([flt])
    assert [b for b, _ in deleted] == [binding("t", "User:alice", R)]
    assert "/kafka-acl/Topic/t" not in store.nodes
    for _ in range(20):
        await asyncio.sleep(0)
    assert not one.authorize(ctx("alice"), R, T, "t")
    # a restart loads what is stored
    three = AclAuthorizer()
    await three.start(store)
    assert three.authorize(ctx("bob"), W, T, "p-9")


async def test_filters():
    a, _ = await make()
    await a.create_acls([binding("orders", "User:a", R), binding("or", "User:b", W, ptype=PRE),
                         binding("*", "User:c", D),
                         binding("kafka-cluster", "User:d", AclOperation.ALTER,
                                 rtype=ResourceType.CLUSTER)])

    def names(rtype=ResourceType.ANY, name=None, ptype=PatternType.ANY):
        f = AclBindingFilter(rtype, name, ptype, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
        return sorted(b.pattern.name for b in a.acls(f))

    assert names() == ["*", "kafka-cluster", "or", "orders"]
    assert names(T, "orders", PatternType.MATCH) == ["*", "or", "orders"]
    assert names(T, "orders", PatternType.ANY) == ["orders"]
    assert names(T, None, PRE) == ["or"]
    assert names(ResourceType.CLUSTER) == ["kafka-cluster"]


async def test_bad_znode_data_is_logged_and_skipped(caplog):
    store = MemoryZNodeStore()
    await store.create("/kafka-acl/Topic/good", json.dumps({"version": 1, "acls": [
        {"principal": "User:a", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:b", "permissionType": "Maybe", "operation": "Read",
         "host": "*"}]}).encode())
    await store.create("/kafka-acl/Topic/bad", b"{not json")
    await store.create("/kafka-acl/Nonsense/x", b"{}")
    a = AclAuthorizer()
    with caplog.at_level(logging.ERROR):
        await a.start(store)
    assert a.authorize(ctx("a"), R, T, "good")
    assert not a.authorize(ctx("b"), R, T, "good")
    text = caplog.text
    assert "/kafka-acl/Topic/bad" in text and "/kafka-acl/Topic/good" in text
    assert "Nonsense" in text


async def test_audit_log(caplog):
    a, _ = await make()
    with caplog.at_level(logging.INFO, logger="kafka.authorizer.logger"):
        a.authorize(ctx("eve", "10.1.2.3", api_key=0), W, T, "orders")
        a.authorize(ctx("eve"), R, T, "quiet", log_if_denied=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "kafka.authorizer.logger"]
    assert lines == ["Principal = User:eve is Denied Operation = Write from host = 10.1.2.3 "
                     "on resource = Topic:LITERAL:orders for request = Produce with "
                     "resourceRefCount = 1"]


def test_from_config_validates():
    from broker.config import KafkaConfig
    from common.config_error import ConfigError

    assert AclAuthorizer.from_config(KafkaConfig({})) is None
    a = AclAuthorizer.from_config(KafkaConfig({
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:a; User:b", "allow.everyone.if.no.acl.found": "true"}))
    assert a.super_users == {KafkaPrincipal("User", "a"), KafkaPrincipal("User", "b")}
    assert a.allow_everyone
    for props, key in (({"authorizer.class.name": "com.example.Mine"}, "authorizer.class.name"),
                       ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                         "super.users": "alice"}, "super.users")):
        with pytest.raises(ConfigError) as info:
            AclAuthorizer.from_config(KafkaConfig(props))
        assert info.value.key == key
