"""First contact: the broker starts as a subprocess and answers ApiVersions to kafka-python."""

from __future__ import annotations

import pytest

from tests.integration.harness import REPO_ROOT, BrokerProcess, api_versions_probe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (REPO_ROOT / "broker" / "server.py").exists(),
                       reason="broker/server.py does not exist yet"),
]


def test_api_versions_with_kafka_python(broker: BrokerProcess):
    from kafka import KafkaAdminClient

    versions = {k: (lo, hi) for k, lo, hi in api_versions_probe(broker.host, broker.port)}
    assert 18 in versions  # ApiVersions advertises itself
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000,
                             bootstrap_timeout_ms=10000)
    try:
        negotiated = {int(k): v for k, v in admin.api_versions().items()}
        assert 18 in negotiated and 3 in negotiated  # ApiVersions and Metadata
        # describe_features sends its own ApiVersions (v3+) and raises on an error code.
        assert isinstance(admin.describe_features(), dict)
    finally:
        admin.close()


def test_restart_keeps_port_and_dirs(broker: BrokerProcess):
    port = broker.port
    broker.restart()
    assert broker.port == port and broker.is_running()
    broker.restart(hard=True)
    assert broker.port == port
    api_versions_probe(broker.host, broker.port)
    assert broker.stop() is not None and not broker.is_running()
