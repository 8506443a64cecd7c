"""KIP-226 dynamic broker configs, KIP-584 features and KIP-714 client metrics against a live
broker: changes through the Admin API (confluent-kafka) and raw requests, applied live,
shown with their source, kept across a restart."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from protocol import api
from tests.integration.raw_client import RawClient

pytestmark = pytest.mark.integration

INCREMENTAL, DESCRIBE, API_VERSIONS, UPDATE_FEATURES, LIST_CM = 44, 32, 18, 57, 74
BROKER, CLIENT_METRICS = 4, 16
JOSEF = [sys.executable, "-m", "broker.cli"]


def incremental(raw, resource_type, name, *ops, validate_only=False):
    Q = api.API_KEYS[INCREMENTAL].request_cls
    r = raw.call(INCREMENTAL, 1, resources=[Q.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=[
            Q.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])],
        validate_only=validate_only)
    return r.responses[0]


def describe(raw, resource_type, name, keys=None):
    D = api.API_KEYS[DESCRIBE].request_cls
    r = raw.call(DESCRIBE, 4, resources=[D.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=keys)],
        include_synonyms=True, include_documentation=False)
    res = r.results[0]
    assert res.error_code == 0, res
    return {c.name: c for c in res.configs}


def test_dynamic_broker_configs_apply_live_and_survive_a_restart(broker_factory, kcat):
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("dyn", 1, 1)])["dyn"].result(20)
    big = b"x" * 1_500_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 3_000_000,
                  "compression.type": "none", "retries": 0})
    errors = []
    p.produce("dyn", value=big, callback=lambda e, m: errors.append(e))
    p.flush(20)
    assert errors and errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"

    # per broker (Admin API) and cluster default (empty name, raw request)
    res = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "3600000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("num.io.threads", "2", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.cleaner.threads", "2", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([res])[res].result(20) is None
    raw = RawClient(broker, timeout=30)
    try:
        assert incremental(raw, BROKER, "", ("message.max.bytes", 0, "2000000")).error_code == 0
        # refused: read-only key, bad value, per-broker-only key at the default level
        r = incremental(raw, BROKER, "0", ("broker.id", 0, "7"))
        assert (r.error_code, r.error_message) == (
            42, "Cannot update these configs dynamically: Set(broker.id)")
        assert incremental(raw, BROKER, "0", ("num.io.threads", 0, "zero")).error_code == 40
        assert incremental(raw, BROKER, "", ("listeners", 0, "PLAINTEXT://:1")).error_code == 42
        assert incremental(raw, BROKER, "5", ("num.io.threads", 0, "3")).error_code == 42
        cfg = describe(raw, BROKER, "0")
        assert (cfg["log.retention.ms"].value, cfg["log.retention.ms"].config_source) == \
            ("3600000", 2)
        assert (cfg["message.max.bytes"].value, cfg["message.max.bytes"].config_source) == \
            ("2000000", 3)
        assert [s.source for s in cfg["message.max.bytes"].synonyms] == [3, 5]
        assert (cfg["num.io.threads"].value, cfg["num.io.threads"].config_source) == ("2", 2)
        default = describe(raw, BROKER, "")
        assert list(default) == ["message.max.bytes"]
        # the topic's default max.message.bytes followed the cluster default, live
        topic_cfg = describe(raw, 2, "dyn", ["max.message.bytes", "retention.ms"])
        assert topic_cfg["max.message.bytes"].value == "2000000"
        assert topic_cfg["retention.ms"].value == "3600000"
    finally:
        raw.close()
    errors.clear()
    p.produce("dyn", value=big, callback=lambda e, m: errors.append(e))
    p.flush(20)
    assert errors == [None]
    # still serving with 2 IO workers; kcat's ApiVersions parse of the feature fields
    out = subprocess.run([kcat, "-b", broker.bootstrap, "-L"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0 and "dyn" in out.stdout, out.stderr

    broker.restart()
    raw = RawClient(broker, timeout=30)
    try:
        cfg = describe(raw, BROKER, "0", ["log.retention.ms", "message.max.bytes"])
        assert (cfg["log.retention.ms"].config_source, cfg["message.max.bytes"].config_source) \
            == (2, 3)
        # deleting the per-broker value falls back to server.properties / the default
        assert incremental(raw, BROKER, "0", ("log.retention.ms", 1, None)).error_code == 0
        cfg = describe(raw, BROKER, "0", ["log.retention.ms"])
        assert cfg["log.retention.ms"].config_source == 5
    finally:
        raw.close()
    assert "Traceback" not in broker.log_text(), broker.log_tail(40)


def test_list_configs_append_from_default_and_every_kafka_dynamic_key(broker_factory):
    """Issue 27 points 3 and 4. APPEND/SUBTRACT on ``<default>`` and on the broker start from
    Kafka's default when nothing is stored at that level (APPEND compact ->
    ``delete,compact``), so a new topic keeps ``delete`` and DeleteRecords works; every key
    of Kafka's DynamicBrokerConfig is accepted, stored and reported, and those Josef does not
    act on are named in a warning."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    from common.config_keys import KAFKA_DYNAMIC_BROKER_CONFIGS

    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    raw = RawClient(broker, timeout=30)
    try:  # <default> (the Admin API refuses an empty broker name)
        assert incremental(raw, BROKER, "", ("log.cleanup.policy", 2, "compact")
                           ).error_code == 0
        assert describe(raw, BROKER, "")["log.cleanup.policy"].value == "delete,compact"
        assert describe(raw, BROKER, "0")["log.cleanup.policy"].value == "delete,compact"
        # the broker level starts from Kafka's default too, not from the cluster default
        res = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[ConfigEntry(
            "log.cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
        assert admin.incremental_alter_configs([res])[res].result(20) is None
        cfg = describe(raw, BROKER, "0")["log.cleanup.policy"]
        assert (cfg.value, cfg.config_source) == ("", 2)
        assert incremental(raw, BROKER, "0", ("log.cleanup.policy", 2, "compact,delete")
                           ).error_code == 0
        assert describe(raw, BROKER, "0")["log.cleanup.policy"].value == "compact,delete"
        assert incremental(raw, BROKER, "0", ("log.cleanup.policy", 1, None)).error_code == 0
        r = incremental(raw, BROKER, "", ("log.retention.ms", 2, "5"))
        assert r.error_code == 42 and "append is not allowed" in r.error_message
    finally:
        raw.close()
    admin.create_topics([NewTopic("inherits", 1, 1)])["inherits"].result(20)
    topic = ConfigResource(ResourceType.TOPIC, "inherits")
    got = admin.describe_configs([topic])[topic].result(20)
    assert got["cleanup.policy"].value == "delete,compact"
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        p.produce("inherits", key=b"k%d" % i, value=b"v")
    assert p.flush(20) == 0
    done = admin.delete_records([TopicPartition("inherits", 0, 2)])
    assert done[TopicPartition("inherits", 0, 2)].result(20).low_watermark == 2  # no POLICY_VIOLATION

    raw = RawClient(broker, timeout=30)
    try:
        current = describe(raw, BROKER, "0")
        ops = []
        for name in sorted(KAFKA_DYNAMIC_BROKER_CONFIGS):
            value = current[name].value if name in current else None
            if value is None:  # sensitive or null: any value of the right type
                value = "1000" if "ms" in name or "bytes" in name else "unused"
            ops.append((name, 0, value))
        r = incremental(raw, BROKER, "0", *ops)
        assert r.error_code == 0, r.error_message
        after = describe(raw, BROKER, "0")
        assert {n for n in KAFKA_DYNAMIC_BROKER_CONFIGS if after[n].config_source != 2} == set()
        r = incremental(raw, BROKER, "0", ("sasl.kerberos.min.time.before.relogin", 0, "30000"))
        assert r.error_code == 0
        cfg = describe(raw, BROKER, "0", ["sasl.kerberos.min.time.before.relogin"])
        assert cfg["sasl.kerberos.min.time.before.relogin"].value == "30000"
        r = incremental(raw, BROKER, "0", *[(n, 1, None) for n in KAFKA_DYNAMIC_BROKER_CONFIGS])
        assert r.error_code == 0
    finally:
        raw.close()
    text = broker.log_text()
    assert "sasl.kerberos.min.time.before.relogin" in text and \
        "Josef does not act on them" in text
    assert "Traceback" not in text, broker.log_tail(40)


def test_features_update_and_show_in_api_versions(broker_factory, kcat):
    broker = broker_factory()
    raw = RawClient(broker, timeout=30)
    try:
        r = raw.call(API_VERSIONS, 3, client_software_name="test",
                     client_software_version="1")
        # issue 27 point 7: features only up to what is served (transaction.version 2 is,
        # since issue 24); a new cluster starts with group.version 1 (KIP-848 groups) and
        # share.version 1 (KIP-932 share groups, issue 28)
        assert {(f.name, f.min_version, f.max_version) for f in r.supported_features} == \
            {("group.version", 0, 1), ("transaction.version", 0, 2), ("share.version", 0, 1)}
        assert [(f.name, f.max_version_level) for f in r.finalized_features] == \
            [("group.version", 1), ("share.version", 1)]
        U = api.API_KEYS[UPDATE_FEATURES].request_cls

        def update(*levels):
            return raw.call(UPDATE_FEATURES, 1, timeout_ms=10000, validate_only=False,
                            feature_updates=[U.FeatureUpdateKey(
                                feature=n, max_version_level=v, upgrade_type=t)
                                for n, v, t in levels])

        up = update(("transaction.version", 3, 1))
        assert [x.error_code for x in up.results] == [95]  # no such level
        up = update(("transaction.version", 1, 1), ("group.version", 1, 1))
        assert up.error_code == 0 and [x.error_code for x in up.results] == [0, 0]
        bad = update(("group.version", 0, 1), ("nope", 1, 1))
        assert [x.error_code for x in bad.results] == [95, 95]
        # group.version 0 switches the consumer protocol off (Kafka 4.0), 1 on again
        heartbeat = dict(group_id="gv-off", member_id="m-gv-off-000000000000", member_epoch=0,
                         instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                         subscribed_topic_names=["gv"], subscribed_topic_regex=None,
                         server_assignor=None, topic_partitions=[])
        assert update(("group.version", 0, 2)).error_code == 0
        assert raw.call(68, 1, **heartbeat).error_code == 35  # UNSUPPORTED_VERSION
        assert update(("group.version", 1, 1)).error_code == 0
        assert raw.call(68, 1, **heartbeat).error_code != 35  # (no coordinator yet: 16)
        # share.version 0 switches share groups off, 1 on again
        share_beat = dict(group_id="sv-off", member_id="m-sv-off", member_epoch=0,
                          rack_id=None, subscribed_topic_names=["sv"])
        assert update(("share.version", 0, 2)).error_code == 0
        assert raw.call(76, 1, **share_beat).error_code == 35  # UNSUPPORTED_VERSION
        assert update(("share.version", 1, 1)).error_code == 0
        assert raw.call(76, 1, **share_beat).error_code != 35
        r = raw.call(API_VERSIONS, 3, client_software_name="test",
                     client_software_version="1")
        assert [(f.name, f.max_version_level) for f in r.finalized_features] == \
            [("group.version", 1), ("share.version", 1), ("transaction.version", 1)]
        epoch = r.finalized_features_epoch
        assert epoch >= 0
    finally:
        raw.close()
    out = subprocess.run([kcat, "-b", broker.bootstrap, "-L"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    run = subprocess.run([*JOSEF, "features", "describe", "--bootstrap-server",
                          broker.bootstrap], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t" \
           "FinalizedVersionLevel: 1" in run.stdout


async def test_client_metrics_subscription_and_pushed_metrics(tmp_path):
    """In-process broker (its registry is the exporter's accessor): a subscription made with
    ``josef client-metrics`` makes librdkafka push its metrics, which land in
    ``services.client_metrics.registry`` and on the Prometheus endpoint's ``/metrics``
    labelled with the client's instance id."""
    import urllib.request

    from broker.config import KafkaConfig
    from broker.server import BrokerServer

    cfg = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                       "broker.id": "0", "offsets.topic.replication.factor": "1",
                       "prometheus.listener": "http://127.0.0.1:0"})
    server = BrokerServer(cfg)
    await server.startup()
    held: list = []  # the producer stays alive (its close is a terminating push)
    try:
        bootstrap = f"127.0.0.1:{server.socket_server.port()}"
        run = await asyncio.to_thread(subprocess.run, [
            *JOSEF, "client-metrics", "--bootstrap-server", bootstrap, "--alter", "--name",
            "producers", "--metrics", "org.apache.kafka.producer.", "--interval", "1000"],
            capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        listed = await asyncio.to_thread(subprocess.run, [
            *JOSEF, "client-metrics", "--bootstrap-server", bootstrap, "--list"],
            capture_output=True, text=True, timeout=60)
        assert listed.stdout.split() == ["producers"]

        def produce(held: list) -> None:
            from confluent_kafka import Producer
            p = Producer({"bootstrap.servers": bootstrap, "client.id": "pusher"})
            held.append(p)
            p.produce("cm-topic", b"v")
            p.flush(10)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not server.services.client_metrics \
                    .registry.snapshot():
                p.poll(0.2)
            p.flush(5)

        def scrape() -> list[str]:
            url = f"http://127.0.0.1:{server.metrics.exporter.port}/metrics"
            body = urllib.request.urlopen(url, timeout=30).read().decode()
            return [ln for ln in body.splitlines()
                    if ln.startswith("kafka_client_org_apache_kafka_producer_")]

        await asyncio.to_thread(produce, held)
        snap = server.services.client_metrics.registry.snapshot()
        assert snap, "no pushed metrics"
        assert all(m.name.startswith("org.apache.kafka.producer.") for m in snap)
        assert {m.client_id for m in snap} == {"pusher"}
        instance = snap[0].client_instance_id
        lines = await asyncio.to_thread(scrape)
        assert any(f'client_instance_id="{instance}"' in ln and 'client_id="pusher"' in ln
                   for ln in lines), lines
        await asyncio.to_thread(held.clear)  # librdkafka pushes with terminating=true
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and await asyncio.to_thread(scrape):
            await asyncio.sleep(0.2)
        assert await asyncio.to_thread(scrape) == [], "series kept after the client closed"
    finally:
        await asyncio.to_thread(held.clear)
        await server.shutdown()
