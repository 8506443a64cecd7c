"""The ``josef`` source and sink over TLS and SASL: ``kafka.*`` security options reach the
client (librdkafka's names), on a broker with SSL / SASL_SSL listeners (local[2])."""

from __future__ import annotations

import pytest

from tests.integration.secure_broker import SecureBroker, confluent

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    broker = SecureBroker(tmp_path_factory.mktemp("spark_secure")).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def spark(spark_local):
    return spark_local


def options(conf: dict) -> dict:
    return {f"kafka.{k}": str(v) for k, v in conf.items()}


def test_sasl_ssl_write_and_read_and_client_certificates(spark, secure):
    from confluent_kafka.admin import AdminClient, NewTopic

    from connectors.spark.wire_fetch import wire_config_supported

    topic = "spark-secure"
    admin = AdminClient(confluent(secure, "PLAINTEXT"))
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    sasl = confluent(secure, "SASL_SSL", "PLAIN", "alice", "alice-secret")
    (spark.range(300).selectExpr("CAST(id AS STRING) AS key", "concat('s', id) AS value")
     .write.format("josef").options(**options(sasl)).option("topic", topic)
     .mode("append").save())

    # SASL_SSL with PLAIN: the Arrow reader speaks it itself.
    assert wire_config_supported(sasl)
    rows = (spark.read.format("josef").options(**options(sasl)).option("subscribe", topic)
            .load().selectExpr("CAST(value AS STRING) AS v").collect())
    assert sorted(r.v for r in rows) == sorted(f"s{i}" for i in range(300))

    # A client certificate: librdkafka reads (the Arrow reader leaves such settings to it).
    mtls = confluent(secure, "SSL", client_cert=True)
    assert not wire_config_supported(mtls)
    count = (spark.read.format("josef").options(**options(mtls)).option("subscribe", topic)
             .load().count())
    assert count == 300

    # A wrong password fails the read before any task runs, naming the cause.
    bad = confluent(secure, "SASL_SSL", "PLAIN", "alice", "wrong")
    with pytest.raises(Exception, match="(?i)authentication|SASL"):
        (spark.read.format("josef").options(**options(bad))
         .option("kafka.default.api.timeout.ms", "5000").option("subscribe", topic)
         .load().count())
