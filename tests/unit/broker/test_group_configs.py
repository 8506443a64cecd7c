"""GROUP config resources (Kafka 4.x group configs) and ListConfigResources v0/v1, through the
DescribeConfigs / IncrementalAlterConfigs / AlterConfigs / ListConfigResources handlers with
the controller's in-memory store; and the KIP-848 coordinator's per-group timeouts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.config import KafkaConfig
from broker.group_configs import GroupConfigManager, validate_group_configs
from broker.handlers import configs
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    ListConfigResourcesRequest,
)

GROUP = 32


class Store:
    """The controller's group config store (controller.api's in-memory default)."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, str]] = {}

    def group_configs(self):
        return {g: dict(c) for g, c in self.groups.items()}

    async def set_group_configs(self, name, cfg):
        if cfg:
            self.groups[name] = dict(cfg)
        else:
            self.groups.pop(name, None)


class Cache:
    def alive_brokers(self):
        return [SimpleNamespace(id=2), SimpleNamespace(id=1)]

    def all_topics(self):
        return ["b", "a"]


def broker():
    cfg = KafkaConfig({"zookeeper.connect": "x:1", "log.dirs": "/tmp/x",
                                       "group.consumer.max.session.timeout.ms": "90000"})
    return SimpleNamespace(group_configs=GroupConfigManager(Store(), cfg), client_metrics=None,
                           metadata_cache=Cache(), security=None, controller=None)


def ctx(b, version):
    return SimpleNamespace(broker=b, api_version=version)


def incremental(group, *ops):
    R = IncrementalAlterConfigsRequest
    return R(validate_only=False, resources=[R.AlterConfigsResource(
        resource_type=GROUP, resource_name=group,
        configs=[R.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])])


def describe(b, group, keys=None):
    R = DescribeConfigsRequest
    resp = configs.handle_describe_configs(ctx(b, 4), R(resources=[R.DescribeConfigsResource(
        resource_type=GROUP, resource_name=group, configuration_keys=keys)]))
    return resp.results[0]


async def test_describe_alter_and_delete_group_configs():
    b = broker()
    r = describe(b, "g")
    assert r.error_code == 0
    got = {c.name: (c.value, c.config_source) for c in r.configs}
    assert got["consumer.session.timeout.ms"] == ("45000", 5)
    assert got["share.auto.offset.reset"] == ("latest", 5)
    assert len(got) == 13  # Kafka 4.2's ten + Josef's three share keys (issue 28)
    resp = await configs.handle_incremental_alter_configs(ctx(b, 1), incremental(
        "g", ("consumer.session.timeout.ms", 0, "60000"),
        ("share.auto.offset.reset", 0, "by_duration:PT1H")))
    assert [x.error_code for x in resp.responses] == [0]
    got = {c.name: (c.value, c.config_source) for c in describe(b, "g").configs}
    assert got["consumer.session.timeout.ms"] == ("60000", 8)  # GROUP_CONFIG
    assert b.group_configs.consumer_timeouts("g", 45000, 5000) == (60000, 5000)
    assert b.group_configs.consumer_timeouts("other", 45000, 5000) == (45000, 5000)
    await configs.handle_incremental_alter_configs(ctx(b, 1), incremental(
        "g", ("consumer.session.timeout.ms", 1, None), ("share.auto.offset.reset", 1, None)))
    assert b.group_configs.group_ids() == []


@pytest.mark.parametrize("name,value,message", [
    ("nope.ms", "1", "Unknown group config name: nope.ms"),
    ("consumer.session.timeout.ms", "abc", "Not a number"),
    ("consumer.session.timeout.ms", "1000", "greater than or equal to"),
    ("consumer.session.timeout.ms", "95000", "less than or equal to"),
    ("consumer.heartbeat.interval.ms", "15000", None),  # fine alone
    ("share.isolation.level", "dirty", "share.isolation.level"),
    ("share.auto.offset.reset", "by_duration:-PT1H", "share.auto.offset.reset"),
])
async def test_bad_group_configs_are_refused(name, value, message):
    b = broker()
    resp = await configs.handle_incremental_alter_configs(ctx(b, 1), incremental(
        "g", (name, 0, value)))
    r = resp.responses[0]
    if message is None:
        assert r.error_code == 0
        return
    assert r.error_code == ErrorCode.INVALID_CONFIG and message in r.error_message
    assert b.group_configs.group_ids() == []


def test_session_must_exceed_heartbeat():
    cfg = KafkaConfig({"zookeeper.connect": "x:1", "log.dirs": "/tmp/x",
                                       "group.consumer.min.session.timeout.ms": "1000"})
    with pytest.raises(KafkaError, match="must be greater than consumer.heartbeat"):
        validate_group_configs({"consumer.session.timeout.ms": "5000"}, cfg)


async def test_alter_configs_replaces_and_empty_name_is_invalid():
    b = broker()
    await configs.handle_incremental_alter_configs(ctx(b, 1), incremental(
        "g", ("share.isolation.level", 0, "read_committed")))
    R = AlterConfigsRequest
    resp = await configs.handle_alter_configs(ctx(b, 2), R(validate_only=False, resources=[
        R.AlterConfigsResource(resource_type=GROUP, resource_name="g", configs=[
            R.AlterableConfig(name="streams.num.standby.replicas", value="1")])]))
    assert resp.responses[0].error_code == 0
    assert b.group_configs.overrides("g") == {"streams.num.standby.replicas": "1"}
    assert describe(b, "").error_code == ErrorCode.INVALID_REQUEST


async def test_list_config_resources_v0_and_v1():
    b = broker()
    b.client_metrics = SimpleNamespace(subscriptions=lambda: {"cpu": {}})
    await configs.handle_incremental_alter_configs(ctx(b, 1), incremental(
        "g1", ("share.isolation.level", 0, "read_committed")))
    v0 = configs.handle_list_config_resources(ctx(b, 0), ListConfigResourcesRequest())
    assert [(r.resource_name, r.resource_type) for r in v0.config_resources] == [("cpu", 16)]
    v1 = configs.handle_list_config_resources(ctx(b, 1), ListConfigResourcesRequest())
    assert [(r.resource_name, r.resource_type) for r in v1.config_resources] == [
        ("g1", 32), ("cpu", 16), ("1", 8), ("2", 8), ("1", 4), ("2", 4), ("a", 2), ("b", 2)]
    only = configs.handle_list_config_resources(ctx(b, 1), ListConfigResourcesRequest(
        resource_types=[2]))
    assert [r.resource_name for r in only.config_resources] == ["a", "b"]
    bad = configs.handle_list_config_resources(ctx(b, 1), ListConfigResourcesRequest(
        resource_types=[2, 99]))
    assert (bad.error_code, bad.config_resources) == (ErrorCode.UNSUPPORTED_VERSION, [])
