"""Dynamic broker configs (issue 27 points 3 and 4): every key of Kafka's DynamicBrokerConfig
is accepted, and IncrementalAlterConfigs APPEND / SUBTRACT on a broker or ``<default>``
list config start from Kafka's default when nothing is stored at that level."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from broker.config import KafkaConfig
from broker.dynamic_config import DEFAULT_ENTITY, DynamicBrokerConfig
from common.config_keys import (
    BROKER_CONFIG_KEYS,
    DYNAMIC_AT_RESTART,
    DYNAMIC_NOT_APPLIED,
    KAFKA_DYNAMIC_BROKER_CONFIGS,
    ConfigType,
)
from controller.broker_config_admin import OP_APPEND, OP_SUBTRACT, apply_incremental_ops
from controller.topic_config import apply_incremental
from protocol.errors import ErrorCode, KafkaError


def dynamic() -> DynamicBrokerConfig:
    config = KafkaConfig({"broker.id": "1", "log.dirs": "/tmp/unused"})
    return DynamicBrokerConfig(SimpleNamespace(config=config, broker_id=1))


def test_every_kafka_dynamic_key_is_known_and_dynamic():
    assert len(KAFKA_DYNAMIC_BROKER_CONFIGS) == 93
    for name in sorted(KAFKA_DYNAMIC_BROKER_CONFIGS):
        assert name in BROKER_CONFIG_KEYS, name
        assert not BROKER_CONFIG_KEYS[name].read_only, name
    assert DYNAMIC_NOT_APPLIED <= KAFKA_DYNAMIC_BROKER_CONFIGS
    assert DYNAMIC_AT_RESTART <= KAFKA_DYNAMIC_BROKER_CONFIGS


def _sample(name: str) -> str:
    key = BROKER_CONFIG_KEYS[name]
    if key.default is None:
        return {ConfigType.LONG: "1000", ConfigType.INT: "1"}.get(key.type, "x")
    if key.type is ConfigType.LIST:
        return ",".join(key.default)
    if key.type is ConfigType.BOOLEAN:
        return str(key.default).lower()
    return str(key.default)


def test_validate_accepts_every_kafka_dynamic_key():
    d = dynamic()
    configs = {name: _sample(name) for name in KAFKA_DYNAMIC_BROKER_CONFIGS}
    d.validate("1", configs)  # per broker: all of them at once
    d.validate("1", {"listener.name.sasl_ssl.sasl.kerberos.min.time.before.relogin": "1000"})
    d.validate(DEFAULT_ENTITY, {"sasl.kerberos.min.time.before.relogin": "30000"})
    with pytest.raises(KafkaError) as e:
        d.validate("1", {"sasl.kerberos.min.time.before.relogin": "soon"})
    assert e.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError) as e:
        d.validate("1", {"no.such.key": "1"})
    assert e.value.code == ErrorCode.INVALID_CONFIG


def test_unapplied_keys_are_stored_reported_and_named_in_a_warning(caplog):
    d = dynamic()
    with caplog.at_level(logging.WARNING, logger="broker.dynamic_config"):
        changed = d.on_change("1", {"sasl.kerberos.min.time.before.relogin": "30000",
                                    "max.connections": "50", "log.retention.bytes": "7"})
    assert changed == {"sasl.kerberos.min.time.before.relogin", "max.connections",
                       "log.retention.bytes"}
    assert d.config.get("sasl.kerberos.min.time.before.relogin") == 30000
    assert "sasl.kerberos.min.time.before.relogin stored and reported, but Josef does not " \
           "act on them" in caplog.text
    assert "max.connections stored; Josef applies them at the next restart" in caplog.text
    assert "log.retention.bytes" not in caplog.text
    (entry,) = d.config.describe(["sasl.kerberos.min.time.before.relogin"])
    assert entry.value == "30000" and int(entry.source) == 2  # DYNAMIC_BROKER_CONFIG


@pytest.mark.parametrize("stored, op, value, want", [
    ({}, OP_APPEND, "compact", "delete,compact"),  # from Kafka's default, not from ""
    ({}, OP_SUBTRACT, "delete", ""),
    ({}, OP_SUBTRACT, "compact", "delete"),
    ({"log.cleanup.policy": "compact"}, OP_APPEND, "delete", "compact,delete"),
    ({"log.cleanup.policy": "delete,compact"}, OP_SUBTRACT, "delete", "compact"),
    ({"log.cleanup.policy": "delete"}, OP_APPEND, "delete,compact", "delete,compact"),
])
def test_append_subtract_broker_list_config(stored, op, value, want):
    got = apply_incremental_ops(stored, [("log.cleanup.policy", op, value)])
    assert got == {"log.cleanup.policy": want}


def test_append_subtract_other_list_keys_and_errors():
    assert apply_incremental_ops({}, [("sasl.enabled.mechanisms", OP_APPEND, "PLAIN")]) == {
        "sasl.enabled.mechanisms": "GSSAPI,PLAIN"}
    assert apply_incremental_ops({}, [("metric.reporters", OP_APPEND, "a.B")]) == {
        "metric.reporters": "a.B"}
    assert apply_incremental_ops({}, [
        ("listener.name.sasl_ssl.sasl.enabled.mechanisms", OP_APPEND, "SCRAM-SHA-256")]) == {
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "GSSAPI,SCRAM-SHA-256"}
    with pytest.raises(KafkaError) as e:
        apply_incremental_ops({}, [("log.retention.ms", OP_APPEND, "1")])
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_topic_append_starts_from_kafka_default():
    assert apply_incremental({}, [("cleanup.policy", OP_APPEND, "compact")]) == {
        "cleanup.policy": "delete,compact"}
    assert apply_incremental({}, [("cleanup.policy", OP_SUBTRACT, "delete")]) == {}
