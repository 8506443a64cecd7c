"""Quota managers with a manual clock: Kafka's Rate windows, throttle times, the eight-level
precedence of user/client-id quotas, the KIP-599 token bucket, connection quotas."""

from __future__ import annotations

import pytest

from broker.config import KafkaConfig
from broker.security.connection_quotas import ConnectionQuotas, parse_overrides
from broker.security.quotas import ClientQuotaManager, ControllerMutationQuota, Rate
from common.config_error import ConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_rate_window():
    r = Rate(samples=11, window_ms=1000)
    r.record(10_000, 0)
    assert r.window_size(0) == 10_000  # at least samples-1 windows
    assert r.measure(0) == 1000.0
    for t in range(1, 20):
        r.record(1000, t * 1000)
    assert r.window_size(19_000) == pytest.approx(10_000)  # oldest kept sample started at 9 s
    assert r.measure(19_000) == pytest.approx(11 * 1000 / 10)


def test_throttle_time_and_unrecord():
    clock = Clock()
    configs = {"clients/app": {"producer_byte_rate": "1000"}}
    m = ClientQuotaManager("producer_byte_rate", lambda: configs, clock_ms=clock)
    assert m.record("u", "app", 9_000) == 0  # 9000 over the 10 s minimum window: 900/s
    # 11000 over 10 s = 1100/s: (1100 - 1000) / 1000 * 10 s = 1000 ms
    assert m.record("u", "app", 2_000) == 1000
    m.unrecord("u", "app", 2_000)
    assert m.record("u", "other", 50_000) == 0  # no quota for this client
    clock.now += 11_000  # the samples age out
    assert m.record("u", "app", 1) == 0
    huge = m.record("u", "app", 10**9)
    assert huge == 11_000  # capped at the whole window


@pytest.mark.parametrize(("entities", "user", "client", "bound"), [
    ({"users/alice/clients/app": 1, "users/alice": 2}, "alice", "app", 1),
    ({"users/alice/clients/<default>": 3, "users/alice": 2}, "alice", "app", 3),
    ({"users/alice": 2, "users/<default>/clients/app": 4}, "alice", "app", 2),
    ({"users/<default>/clients/app": 4, "users/<default>": 6}, "alice", "app", 4),
    ({"users/<default>/clients/<default>": 5, "users/<default>": 6}, "bob", "x", 5),
    ({"users/<default>": 6, "clients/app": 7}, "bob", "app", 6),
    ({"clients/app": 7, "clients/<default>": 8}, "bob", "app", 7),
    ({"clients/<default>": 8}, "bob", "app", 8),
    ({"users/alice": 2}, "bob", "app", None),
    ({"users/a%2Cb": 9}, "a,b", "", 9),  # sanitized user names
])
def test_precedence(entities, user, client, bound):
    configs = {p: {"consumer_byte_rate": str(v)} for p, v in entities.items()}
    m = ClientQuotaManager("consumer_byte_rate", lambda: configs)
    assert m.bound_for(user, client) == bound


def test_controller_mutation_token_bucket():
    clock = Clock()
    configs = {"clients/c": {"controller_mutation_rate": "2"}}
    q = ControllerMutationQuota(ClientQuotaManager("controller_mutation_rate", lambda: configs,
                                                   clock_ms=clock))
    assert q.exceeded("u", "c") == 0
    assert q.record("u", "c", 22) == 0  # the bucket holds 2/s * 11 s = 22 tokens
    assert q.record("u", "c", 4) == 2000  # 4 tokens short at 2 tokens/s
    assert q.exceeded("u", "c") == 2000
    clock.now += 2000
    assert q.exceeded("u", "c") == 0
    assert q.record("u", "other", 100) == 0  # no quota


def test_connection_quotas():
    assert parse_overrides("127.0.0.2:1, localhost:5") == {"127.0.0.2": 1, "127.0.0.1": 5}
    with pytest.raises(ConfigError):
        parse_overrides("nonsense")
    clock = Clock()
    cfg = KafkaConfig({"listeners": "PLAINTEXT://:0,INTERNAL://:0",
                       "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                       "inter.broker.listener.name": "INTERNAL",
                       "max.connections.per.ip": "10",
                       "max.connections.per.ip.overrides": "10.0.0.1:2",
                       "listener.name.plaintext.max.connections": "50",
                       "max.connection.creation.rate": "5"})
    configs = {"ips/10.0.0.9": {"connection_creation_rate": "1"}}
    cq = ConnectionQuotas(cfg, clock_ms=clock, ip_quotas=lambda: configs)
    assert cq.max_for_ip("10.0.0.1") == 2 and cq.max_for_ip("10.0.0.5") == 10
    assert cq.max_for_listener("PLAINTEXT") == 50
    assert not cq.counts_for_broker("INTERNAL")
    delays = [cq.creation_delay_ms("PLAINTEXT") for _ in range(60)]
    assert delays[:50] == [0] * 50 and delays[-1] > 0  # 5/s over the 10 s minimum window
    assert all(cq.creation_delay_ms("INTERNAL") == 0 for _ in range(100))  # exempt
    assert [cq.ip_throttle_ms("10.0.0.9") for _ in range(11)][-1] > 0
    assert cq.ip_throttle_ms("10.0.0.8") == 0
