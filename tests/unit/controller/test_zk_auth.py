"""The broker's ZooKeeper identity from the JAAS Client section named in KAFKA_OPTS."""

import pytest

from controller.zk_auth import ZkAuthError, zookeeper_auth_data


def test_client_section_gives_digest_credentials(tmp_path):
    f = tmp_path / "jaas.conf"
    f.write_text('KafkaServer {\n  x.Module required a="b";\n};\n'
                 'Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                 '  username="kafka" password="s3cr;et";\n};\n')
    env = {"KAFKA_OPTS": f"-Xmx1g -Djava.security.auth.login.config={f}"}
    assert zookeeper_auth_data(env) == [("digest", "kafka:s3cr;et")]
    other = dict(env, KAFKA_OPTS=env["KAFKA_OPTS"] + " -Dzookeeper.sasl.clientconfig=Nope")
    assert zookeeper_auth_data(other) is None
    assert zookeeper_auth_data({}) is None


def test_bad_jaas_files_are_reported(tmp_path):
    with pytest.raises(ZkAuthError, match="cannot read the JAAS file"):
        zookeeper_auth_data({"KAFKA_OPTS": f"-Djava.security.auth.login.config={tmp_path}/x"})
    f = tmp_path / "jaas.conf"
    f.write_text("Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required;\n};\n")
    with pytest.raises(ZkAuthError, match="no username/password"):
        zookeeper_auth_data({"KAFKA_OPTS": f"-Djava.security.auth.login.config={f}"})
