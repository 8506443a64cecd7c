"""KafkaConfig: Kafka's defaults, precedence rules, typed errors and DescribeConfigs metadata."""

import logging
from pathlib import Path

import pytest

from broker.config import Endpoint, KafkaConfig
from broker.config_values import parse_override
from common.config_error import ConfigError
from common.config_keys import BROKER_CONFIG_KEYS, ConfigSource, ConfigType
from common.properties import load_properties

REPO = Path(__file__).resolve().parents[3]


def test_kafka_defaults():
    c = KafkaConfig()
    assert c.broker_id == -1
    assert c.listeners == [Endpoint("PLAINTEXT", "", 9092, "PLAINTEXT")]
    assert c.log_dirs == ["/tmp/kafka-logs"]
    assert c.num_partitions == 1
    assert c.auto_create_topics_enable is True
    assert c.log_segment_bytes == 1073741824
    assert c.log_roll_ms == 168 * 3600 * 1000
    assert c.log_retention_ms == 168 * 3600 * 1000
    assert c.log_retention_bytes == -1
    assert c.log_retention_check_interval_ms == 300000
    assert c.message_max_bytes == 1048588
    assert c.socket_request_max_bytes == 104857600
    assert c.num_network_threads == 3
    assert c.num_io_threads == 8
    assert c.queued_max_requests == 500
    assert c.connections_max_idle_ms == 600000
    assert c.offsets_topic_num_partitions == 50
    assert c.offsets_topic_replication_factor == 3
    assert c.offsets_retention_minutes == 10080
    assert c.group_initial_rebalance_delay_ms == 3000
    assert c.min_insync_replicas == 1
    assert c.delete_topic_enable is True
    assert c.compression_type == "producer"
    assert c.log_cleanup_policy == ["delete"]
    assert c.get("log.index.size.max.bytes") == 10485760
    assert c.get("log.index.interval.bytes") == 4096
    assert c.embedded_mode and c.zookeeper_connect is None
    assert c.zookeeper_connection_timeout_ms == 18000


def test_from_file_with_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(
        "broker.id = 7\n"
        "listeners=PLAINTEXT://127.0.0.1:19092\n"
        "log.dirs=/a, /b\n"
        "auto.create.topics.enable=FALSE\n"
        "zookeeper.connect=localhost:2181/josef\n"
    )
    c = KafkaConfig.from_file(path, overrides=["broker.id=8", "num.partitions=3"])
    assert c.broker_id == 8
    assert c.num_partitions == 3
    assert c.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 19092, "PLAINTEXT")]
    assert c.advertised_listeners == c.listeners
    assert c.log_dirs == ["/a", "/b"]
    assert c.auto_create_topics_enable is False
    assert not c.embedded_mode and c.zookeeper_connect == "localhost:2181/josef"
    assert c.source("broker.id") is ConfigSource.STATIC_BROKER_CONFIG
    assert c.source("num.partitions") is ConfigSource.STATIC_BROKER_CONFIG
    assert c.source("log.segment.bytes") is ConfigSource.DEFAULT_CONFIG
    assert c.is_set("log.dirs") and not c.is_set("log.dir")


def test_log_dirs_wins_over_log_dir():
    assert KafkaConfig({"log.dir": "/x"}).log_dirs == ["/x"]
    assert KafkaConfig({"log.dir": "/x", "log.dirs": "/y,/z"}).log_dirs == ["/y", "/z"]


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "5"}, 5),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.minutes": "-1"}, -1),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.ms": "-1", "log.retention.hours": "5"}, -1),
    ],
)
def test_retention_precedence(props, expected):
    assert KafkaConfig(props).log_retention_ms == expected


def test_roll_and_flush_precedence():
    c = KafkaConfig({"log.roll.hours": "2"})
    assert c.log_roll_ms == 7_200_000
    assert KafkaConfig({"log.roll.hours": "2", "log.roll.ms": "1000"}).log_roll_ms == 1000
    assert c.log_flush_interval_ms == 2**63 - 1
    assert KafkaConfig({"log.flush.interval.ms": "50"}).log_flush_interval_ms == 50
    assert KafkaConfig({"zookeeper.connection.timeout.ms": "99"}) \
        .zookeeper_connection_timeout_ms == 99


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("num.partitions", "abc", "32-bit integer in [1,...]"),
        ("num.partitions", "0", "[1,...]"),
        ("num.partitions", "1_000", "32-bit integer"),
        ("broker.id", "2147483648", "32-bit integer"),
        ("offsets.topic.replication.factor", "40000", "16-bit integer"),
        ("auto.create.topics.enable", "yes", "true or false"),
        ("log.message.timestamp.type", "WallClock", "[CreateTime, LogAppendTime]"),
        ("compression.type", "brotli", "producer"),
        ("log.cleanup.policy", "delete,shred", "[compact, delete]"),
        ("log.retention.ms", "", "64-bit integer"),
        ("log.segment.bytes", "10", "[14,...]"),
        ("fetch.max.bytes", "1000", "[1024,...]"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "[0,...,1]"),
    ],
)
def test_bad_value_names_key_value_and_allowed(key, value, allowed):
    with pytest.raises(ConfigError) as info:
        KafkaConfig({key: value})
    err = info.value
    assert err.key == key and err.value == value
    assert key in str(err) and repr(value) in str(err)
    assert allowed in str(err)


@pytest.mark.parametrize(
    ("props", "key", "fragment"),
    [
        ({"listeners": "PLAINTEXT://host"}, "listeners", "malformed"),
        ({"listeners": "PLAINTEXT://:70000"}, "listeners", "bad port"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "listeners", "duplicate"),
        ({"listeners": "INTERNAL://:1"}, "listeners", "no security protocol"),
        ({"listeners": "PLAINTEXT://:9092", "listener.name.plaintext.ssl.client.auth": "maybe"},
         "listener.name.plaintext.ssl.client.auth", "required"),
        ({"listeners": ""}, "listeners", "at least one"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners", "0.0.0.0"),
        ({"advertised.listeners": "OTHER://h:1",
          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"},
         "advertised.listeners", "not a listener"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map",
         "bad entry"),
        ({"log.dirs": " , "}, "log.dirs", "one or more"),
        ({"log.dirs": "/a,/a"}, "log.dirs", "twice"),
        ({"inter.broker.listener.name": "NOPE"}, "inter.broker.listener.name", "PLAINTEXT"),
        ({"broker.id": "-2"}, "broker.id", "[-1,...,1000]"),
        ({"broker.id": "1001"}, "broker.id", "reserved.broker.max.id"),
        ({"broker.id": "-1", "broker.id.generation.enable": "false"}, "broker.id", "[0,"),
        ({"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"},
         "group.min.session.timeout.ms", "at most"),
    ],
)
def test_cross_key_checks(props, key, fragment):
    with pytest.raises(ConfigError) as info:
        KafkaConfig(props)
    assert info.value.key == key
    assert fragment in str(info.value)


def test_named_listeners_and_ipv6():
    c = KafkaConfig({
        "listeners": "INTERNAL://127.0.0.1:9093, external://[::1]:0",
        "advertised.listeners": "INTERNAL://broker1:9093",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    })
    assert c.listeners == [Endpoint("INTERNAL", "127.0.0.1", 9093, "PLAINTEXT"),
                           Endpoint("EXTERNAL", "::1", 0, "PLAINTEXT")]
    assert c.listeners[1].connection_string() == "EXTERNAL://[::1]:0"
    assert c.advertised_listeners == [Endpoint("INTERNAL", "broker1", 9093, "PLAINTEXT")]


def test_advertised_endpoints_fill_in_bound_port():
    c = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0"})
    assert c.advertised_endpoints({"PLAINTEXT": 40001}) == [
        Endpoint("PLAINTEXT", "127.0.0.1", 40001, "PLAINTEXT")]


def test_unknown_keys_warned_once_each(caplog):
    caplog.set_level(logging.WARNING, logger="broker.config")
    c = KafkaConfig({"no.such.key": "1", "process.roles": "broker"},
                    overrides=["no.such.key=2", "num.partitions=2"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(c.unknown_keys) == ["no.such.key", "process.roles"]
    assert len(warnings) == 2
    assert any("'no.such.key'" in w for w in warnings)
    assert any("'process.roles'" in w for w in warnings)
    assert c.num_partitions == 2


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        KafkaConfig(overrides=["num.partitions"])
    assert parse_override("a.b=c=d") == ("a.b", "c=d")


def test_missing_file_is_config_error(tmp_path):
    with pytest.raises(ConfigError, match="Cannot load config file .*nope.properties"):
        KafkaConfig.from_file(tmp_path / "nope.properties")


def test_describe_metadata():
    c = KafkaConfig({"num.partitions": "4", "ssl.key.password": "s3cret"})
    entries = {e.name: e for e in c.describe()}
    assert set(entries) == set(BROKER_CONFIG_KEYS)
    np = entries["num.partitions"]
    assert (np.value, np.type, np.source, np.is_default) == (
        "4", ConfigType.INT, ConfigSource.STATIC_BROKER_CONFIG, False)
    seg = entries["log.segment.bytes"]
    assert (seg.value, seg.source, seg.is_default, seg.read_only) == (
        "1073741824", ConfigSource.DEFAULT_CONFIG, True, False)
    assert entries["broker.id"].read_only is True
    assert entries["log.retention.ms"].value is None
    assert entries["log.cleanup.policy"].value == "delete"
    pw = entries["ssl.key.password"]
    assert pw.is_sensitive and pw.value is None and pw.type is ConfigType.PASSWORD
    assert "s3cret" not in repr(c)
    assert [e.name for e in c.describe(["num.partitions", "bogus"])] == ["num.partitions"]


def test_sensitive_bad_value_is_not_echoed():
    with pytest.raises(ConfigError) as info:
        KafkaConfig({"ssl.key.password": 12})
    assert "12" not in str(info.value).replace("ssl.key.password", "")


def test_topic_config_defaults_follow_broker_keys():
    c = KafkaConfig({"log.segment.bytes": "1000", "log.retention.minutes": "3",
                     "log.cleanup.policy": "compact, delete"})
    d = c.topic_config_defaults()
    assert d["segment.bytes"] == "1000"
    assert d["retention.ms"] == "180000"
    assert d["cleanup.policy"] == "compact,delete"
    assert d["max.message.bytes"] == "1048588"
    assert d["unclean.leader.election.enable"] == "false"


def test_shipped_config_files_parse_without_unknown_keys():
    for path in [REPO / "config" / "server.properties",
                 *sorted((REPO / "config" / "cluster").glob("broker-*.properties"))]:
        props = load_properties(path)
        c = KafkaConfig(props)
        assert c.unknown_keys == [], path
    single = KafkaConfig.from_file(REPO / "config" / "server.properties")
    assert single.embedded_mode
    assert single.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")]
    assert single.log_dirs == ["/tmp/josef-logs"]
    ids = {KafkaConfig.from_file(p).broker_id
           for p in (REPO / "config" / "cluster").glob("broker-*.properties")}
    assert ids == {1, 2, 3}


def test_readme_config_table_matches_defaults():
    """Every backticked default in the README's config table is KafkaConfig's default."""
    import re

    defaults = KafkaConfig()
    rows = re.findall(r"^\| `([a-z0-9.]+)` \| `([^`]*)` \|", (REPO / "README.md").read_text(),
                      re.MULTILINE)
    assert len(rows) >= 30
    entries = {e.name: e.value for e in defaults.describe()}
    for key, default in rows:
        assert key in BROKER_CONFIG_KEYS, key
        assert entries[key] == default, (key, default, entries[key])


def test_queued_max_request_bytes_is_unbounded_or_at_least_one_request():
    assert KafkaConfig().get("queued.max.request.bytes") == -1
    ok = KafkaConfig({"queued.max.request.bytes": "104857600"})
    assert ok.get("queued.max.request.bytes") == 104857600
    assert KafkaConfig({"queued.max.request.bytes": "0"}).get("queued.max.request.bytes") == 0
    with pytest.raises(ConfigError, match="queued.max.request.bytes"):
        KafkaConfig({"queued.max.request.bytes": "1048576"})
