"""DelegationTokenManager: Kafka's token znode JSON, HMAC, renew/expire rules, change
notifications between two brokers sharing a store, expiry removal (manual clock)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

from broker.config import KafkaConfig
from broker.security.delegation_tokens import DelegationTokenManager
from broker.security.principal import KafkaPrincipal
from controller.znode_store import MemoryZNodeStore
from protocol.errors import ErrorCode

ALICE, BOB, CAROL = (KafkaPrincipal("User", n) for n in ("alice", "bob", "carol"))


class Clock:
    now = 1_000_000

    def __call__(self):
        return self.now


def manager(clock, **props):
    cfg = KafkaConfig({"delegation.token.secret.key": "s3cret",
                       "delegation.token.max.lifetime.ms": "100000",
                       "delegation.token.expiry.time.ms": "10000", **props})
    return DelegationTokenManager(cfg, clock_ms=clock)


async def test_create_renew_expire():
    clock = Clock()
    store = MemoryZNodeStore()
    m = manager(clock)
    await m.start(store)
    info = await m.create(ALICE, ALICE, [BOB], -1)
    assert info.hmac == hmac.new(b"s3cret", info.token_id.encode(), hashlib.sha512).digest()
    assert (info.issue_ms, info.expiry_ms, info.max_ms) == (1_000_000, 1_010_000, 1_100_000)
    doc = json.loads(store.nodes[f"/delegation_token/tokens/{info.token_id}"][0])
    assert doc == {"version": 3, "owner": "User%3Aalice", "tokenRequester": "User%3Aalice",
                   "renewers": ["User%3Abob"], "issueTimestamp": 1_000_000,
                   "maxTimestamp": 1_100_000, "expiryTimestamp": 1_010_000,
                   "tokenId": info.token_id}
    cred, owner, expiry = m.scram_credential("SCRAM-SHA-256", info.token_id)
    assert owner == ALICE and expiry == 1_010_000 and cred.iterations == 4096
    assert await m.renew(CAROL, info.hmac, 5000) == (ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH,
                                                     -1)
    assert await m.renew(BOB, info.hmac, 500_000) == (ErrorCode.NONE, 1_100_000)  # capped
    assert await m.renew(BOB, b"x", 1) == (ErrorCode.DELEGATION_TOKEN_NOT_FOUND, -1)
    clock.now = 1_200_000
    assert await m.renew(ALICE, info.hmac, 1) == (ErrorCode.DELEGATION_TOKEN_EXPIRED, -1)
    assert m.scram_credential("SCRAM-SHA-256", info.token_id) is None
    assert await m.expire_tokens() == 1
    assert not m.tokens
    assert f"/delegation_token/tokens/{info.token_id}" not in store.nodes
    await m.shutdown()


async def test_two_brokers_follow_notifications_and_restart():
    clock = Clock()
    store = MemoryZNodeStore()
    one, two = manager(clock), manager(clock)
    await one.start(store)
    await two.start(store)
    info = await one.create(ALICE, ALICE, [], -1)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if info.token_id in two.tokens:
            break
    assert two.scram_credential("SCRAM-SHA-512", info.token_id) is not None
    assert (await one.expire(ALICE, info.hmac, -1))[0] == ErrorCode.NONE
    for _ in range(50):
        await asyncio.sleep(0.01)
        if info.token_id not in two.tokens:
            break
    assert info.token_id not in two.tokens
    kept = await one.create(BOB, ALICE, [], 5000)
    three = manager(clock)
    await three.start(store)
    assert three.tokens[kept.token_id].requester == ALICE
    for m in (one, two, three):
        await m.shutdown()


def test_disabled_without_secret():
    assert not DelegationTokenManager(KafkaConfig({})).enabled
