"""Admin APIs against a live broker through confluent-kafka's and kafka-python's AdminClient:
DescribeConfigs / AlterConfigs / IncrementalAlterConfigs, CreatePartitions, DeleteRecords,
ElectLeaders, DescribeLogDirs, and config changes observed in behaviour."""

from __future__ import annotations

import time
import uuid
import warnings

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

pytestmark = [
    pytest.mark.timeout(120),
    # kafka-python 3 reads its resources with a deprecated importlib API
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


def _admin(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _topic(prefix="adm") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(admin, name, partitions=1, config=None):
    fs = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    fs[name].result(timeout=15)


def _alter(admin, res):
    """Legacy AlterConfigs (deprecated in confluent-kafka, still what the test exercises)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fs = admin.alter_configs([res])
    return fs[res].result(timeout=15)


def _describe_topic_configs(admin, name):
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    return admin.describe_configs([res])[res].result(timeout=15)


def _produce(b, topic, values, partition=0, **conf):
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, **conf})
    errors = []
    for v in values:
        p.produce(topic, v, partition=partition,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.flush(10)
    return errors


def test_describe_topic_configs_sources_and_synonyms(shared_broker):
    admin = _admin(shared_broker)
    name = _topic()
    _create(admin, name, config={"retention.ms": "12345"})
    cfg = _describe_topic_configs(admin, name)
    r = cfg["retention.ms"]
    assert r.value == "12345" and r.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not r.is_read_only and not r.is_sensitive
    syn = [s.name for s in r.synonyms.values()] if isinstance(r.synonyms, dict) \
        else [s.name for s in r.synonyms]
    assert syn[0] == "retention.ms" and "log.retention.hours" in syn
    seg = cfg["segment.bytes"]
    assert seg.source in (ConfigSource.DEFAULT_CONFIG.value,
                          ConfigSource.STATIC_BROKER_CONFIG.value)
    assert "cleanup.policy" in cfg and cfg["cleanup.policy"].value == "delete"


def test_describe_unknown_topic_and_broker(shared_broker):
    admin = _admin(shared_broker)
    res = ConfigResource(ConfigResource.Type.TOPIC, _topic("missing"))
    with pytest.raises(KafkaException) as e:
        admin.describe_configs([res])[res].result(timeout=15)
    assert e.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    md = admin.list_topics(timeout=10)
    bid = str(next(iter(md.brokers)))
    res = ConfigResource(ConfigResource.Type.BROKER, bid)
    cfg = admin.describe_configs([res])[res].result(timeout=15)
    assert cfg["broker.id"].is_read_only
    assert cfg["log.segment.bytes"].value is not None


def test_alter_and_incremental_alter(shared_broker):
    admin = _admin(shared_broker)
    name = _topic()
    _create(admin, name)
    res = ConfigResource(ConfigResource.Type.TOPIC, name,
                         set_config={"retention.bytes": "1000000", "segment.ms": "60000"})
    _alter(admin, res)
    cfg = _describe_topic_configs(admin, name)
    assert cfg["retention.bytes"].value == "1000000" and cfg["segment.ms"].value == "60000"

    inc = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([inc])[inc].result(timeout=15)
    cfg = _describe_topic_configs(admin, name)
    assert cfg["retention.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["max.message.bytes"].value == "2048"
    assert "compact" in cfg["cleanup.policy"].value
    # incremental changes leave other overrides alone
    assert cfg["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # ... while AlterConfigs replaces the whole override set
    _alter(admin, ConfigResource(ConfigResource.Type.TOPIC, name,
                                 set_config={"retention.ms": "5000"}))
    cfg = _describe_topic_configs(admin, name)
    assert cfg["segment.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["max.message.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    bad = ConfigResource(ConfigResource.Type.TOPIC, name, set_config={"no.such.config": "1"})
    with pytest.raises(KafkaException) as e:
        _alter(admin, bad)
    assert e.value.args[0].name() == "INVALID_CONFIG"
    bad = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "abc", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([bad])[bad].result(timeout=15)
    assert e.value.args[0].name() == "INVALID_CONFIG"


def test_alter_broker_config_refused(shared_broker):
    admin = _admin(shared_broker)
    bid = str(next(iter(admin.list_topics(timeout=10).brokers)))
    res = ConfigResource(ConfigResource.Type.BROKER, bid, set_config={"broker.id": "7"})
    with pytest.raises(KafkaException) as e:
        _alter(admin, res)
    assert e.value.args[0].name() == "INVALID_REQUEST"
    assert "dynamically" in e.value.args[0].str()


def test_create_partitions(shared_broker):
    admin = _admin(shared_broker)
    name = _topic()
    _create(admin, name, partitions=1)
    admin.create_partitions([NewPartitions(name, 3)])[name].result(timeout=15)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3:
            break
        time.sleep(0.1)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3
    with pytest.raises(KafkaException) as e:
        admin.create_partitions([NewPartitions(name, 2)])[name].result(timeout=15)
    assert e.value.args[0].name() == "INVALID_PARTITIONS"


def test_delete_records(shared_broker):
    admin = _admin(shared_broker)
    name = _topic()
    _create(admin, name)
    assert _produce(shared_broker, name, [b"v%d" % i for i in range(10)]) == []
    fs = admin.delete_records([TopicPartition(name, 0, 4)])
    res = fs[TopicPartition(name, 0, 4)].result(timeout=15)
    assert res.low_watermark == 4
    with pytest.raises(KafkaException) as e:
        admin.delete_records([TopicPartition(name, 0, 50)])[
            TopicPartition(name, 0, 50)].result(timeout=15)
    assert e.value.args[0].name() == "OFFSET_OUT_OF_RANGE"
    res = admin.delete_records([TopicPartition(name, 0, -1)])[
        TopicPartition(name, 0, -1)].result(timeout=15)
    assert res.low_watermark == 10


def test_kafka_python_admin(shared_broker):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewPartitions as KPNewPartitions
    from kafka.admin import NewTopic as KPNewTopic

    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap,
                             request_timeout_ms=10000)
    try:
        name = _topic("kp")
        admin.create_topics([KPNewTopic(name, 1, 1)])
        admin.alter_configs([KPResource(ConfigResourceType.TOPIC, name,
                                        configs={"retention.ms": "777"})])
        resp = admin.describe_configs([KPResource(ConfigResourceType.TOPIC, name)])
        assert resp["topic"][name]["retention.ms"]["value"] == "777"
        assert resp["topic"][name]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        admin.create_partitions({name: KPNewPartitions(2)})
        (brk,) = admin.describe_log_dirs()
        listed = {t["name"]: len(t["partitions"]) for d in brk["log_dirs"]
                  for t in d["topics"]}
        assert listed.get(name) == 2
        from kafka import KafkaProducer
        from kafka import TopicPartition as KTP
        prod = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
        for i in range(5):
            prod.send(name, b"m%d" % i, partition=0).get(timeout=10)
        prod.close()
        res = admin.delete_records({KTP(name, 0): 3})
        assert res[KTP(name, 0)]["low_watermark"] == 3
    finally:
        admin.close()


def test_describe_log_dirs_raw(shared_broker):
    from client.connection import KafkaClient

    admin = _admin(shared_broker)
    name = _topic()
    _create(admin, name, partitions=2)
    _produce(shared_broker, name, [b"x" * 100] * 3)
    with KafkaClient(shared_broker.bootstrap) as c:
        resp = c.request(35, {"topics": None})
    assert resp.error_code == 0 and len(resp.results) == 1
    d = resp.results[0]
    assert d.total_bytes > 0 and 0 <= d.usable_bytes <= d.total_bytes
    sizes = {(t.name, p.partition_index): p.partition_size for t in d.topics
             for p in t.partitions}
    assert sizes[(name, 0)] > 300 and sizes[(name, 1)] == 0


def test_elect_leaders_single_node(shared_broker):
    from client.connection import KafkaClient

    admin = _admin(shared_broker)
    name = _topic()
    _create(admin, name)
    with KafkaClient(shared_broker.bootstrap) as c:
        resp = c.request(43, {"election_type": 0, "timeout_ms": 5000,
                              "topic_partitions": [{"topic": name, "partitions": [0]}]})
    (r,) = resp.replica_election_results
    assert r.topic == name
    assert r.partition_result[0].error_code == 84  # ELECTION_NOT_NEEDED


def test_retention_change_deletes_old_segments(broker_factory):
    b = broker_factory({"log.retention.check.interval.ms": "200"})
    admin = _admin(b)
    name = _topic("ret")
    _create(admin, name, config={"segment.bytes": "200"})
    assert _produce(b, name, [b"y" * 100 for _ in range(10)]) == []
    seg_dir = b.directory / "logs" if hasattr(b, "directory") else None
    res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=15)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=b.bootstrap)
    try:
        deadline = time.monotonic() + 15
        start = 0
        while time.monotonic() < deadline:
            start = c.beginning_offsets([KTP(name, 0)])[KTP(name, 0)]
            if start >= 9:
                break
            time.sleep(0.2)
        assert start >= 9, "retention.ms=1 should have deleted all but the active segment"
    finally:
        c.close()
    del seg_dir


def test_max_message_bytes_change_rejects_larger_record(shared_broker):
    admin = _admin(shared_broker)
    name = _topic("mmb")
    _create(admin, name)
    assert _produce(shared_broker, name, [b"z" * 2000]) == []
    res = ConfigResource(ConfigResource.Type.TOPIC, name, set_config={"max.message.bytes": "500"})
    _alter(admin, res)
    errors = _produce(shared_broker, name, [b"z" * 2000])
    assert errors and errors[0].name() == "MSG_SIZE_TOO_LARGE"
    assert _produce(shared_broker, name, [b"z" * 100]) == []


def test_compression_type_change_recompresses_on_append(shared_broker):
    """compression.type=gzip: an uncompressed batch is stored gzip; back to producer: kept."""
    from protocol.records import iter_batches

    admin = _admin(shared_broker)
    name = _topic("cmp")
    _create(admin, name, config={"compression.type": "gzip"})
    assert _produce(shared_broker, name, [b"a" * 300], **{"compression.type": "none"}) == []
    inc = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("compression.type", "producer",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([inc])[inc].result(timeout=15)
    assert _produce(shared_broker, name, [b"b" * 300], **{"compression.type": "none"}) == []
    seg = shared_broker.log_dir / f"{name}-0" / "00000000000000000000.log"
    batches = list(iter_batches(seg.read_bytes()))
    assert [b.compression_type for b in batches] == [1, 0]  # gzip, then as produced
    assert [r.value for b in batches for r in b.iter_records()] == [b"a" * 300, b"b" * 300]
    from kafka import KafkaConsumer
    c = KafkaConsumer(name, bootstrap_servers=shared_broker.bootstrap,
                      auto_offset_reset="earliest", consumer_timeout_ms=5000)
    try:
        assert [m.value for m in c][:2] == [b"a" * 300, b"b" * 300]
    finally:
        c.close()


def test_topic_config_survives_restart(broker_factory):
    b = broker_factory()
    admin = _admin(b)
    name = _topic("rst")
    _create(admin, name)
    res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("max.message.bytes", "600", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=15)
    b.restart()
    admin = _admin(b)
    assert _describe_topic_configs(admin, name)["max.message.bytes"].value == "600"
    errors = _produce(b, name, [b"q" * 1500])
    assert errors and errors[0].name() == "MSG_SIZE_TOO_LARGE"
