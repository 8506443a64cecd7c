"""Stock clients over SSL, SASL_PLAINTEXT and SASL_SSL (issue 15).

One broker (module scope) with every protocol (tests/integration/secure_broker.py).
kafka-python, confluent-kafka, aiokafka, kcat and the Java client produce and consume over
SSL with and without a client certificate, and over SASL with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 (JAAS users, and SCRAM users made with ``josef configs``); OAUTHBEARER with the
unsecured validator. Wrong credentials fail with an authentication error, are logged once per
connection as Kafka logs them, and write nothing.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

from tests.integration.harness import run_java_client, run_kcat
from tests.integration.secure_broker import (
    SecureBroker,
    aiokafka_kwargs,
    confluent,
    java_props,
    kafka_python,
    kcat_args,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    b = SecureBroker(tmp_path_factory.mktemp("secure")).start()
    try:
        b.add_scram_user("carol", "carol-secret")
        yield b
    finally:
        b.stop()


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _end_offset(b: SecureBroker, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=b.bootstrap())
    try:
        tp = TopicPartition(topic, 0)
        return c.end_offsets([tp]).get(tp, 0) if c.partitions_for_topic(topic) else 0
    finally:
        c.close()


def _kafka_python_round_trip(b, topic, *args, **kw) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    p = KafkaProducer(**kafka_python(b, *args, **kw))
    for i in range(5):
        p.send(topic, f"v{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000,
                      **kafka_python(b, *args, **kw))
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 5:
            break
    c.close()
    return got


@pytest.mark.parametrize(("protocol", "mechanism", "user", "password", "cert"), [
    ("SSL", None, None, None, False),
    ("SSL", None, None, None, True),
    ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret", False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret", False),
    ("SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret", False),
])
def test_kafka_python(secure, protocol, mechanism, user, password, cert):
    topic = _topic("kp")
    kw = {"client_cert": cert}
    if mechanism:
        kw.update(user=user, password=password)
    got = _kafka_python_round_trip(secure, topic, protocol, mechanism, **kw)
    assert got == [f"v{i}".encode() for i in range(5)]


def _confluent_round_trip(conf: dict, topic: str, n: int = 5) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    errors = []
    p = Producer({**conf, "error_cb": errors.append})
    for i in range(n):
        p.produce(topic, f"c{i}".encode())
    assert p.flush(30) == 0, errors
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


@pytest.mark.parametrize(("protocol", "mechanism", "user", "password", "cert"), [
    ("SSL", None, None, None, True),
    ("SASL_SSL", "PLAIN", "alice", "alice-secret", False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", "carol", "carol-secret", False),
    ("SASL_PLAINTEXT", "OAUTHBEARER", "alice", None, False),
])
def test_confluent_kafka(secure, protocol, mechanism, user, password, cert):
    topic = _topic("ck")
    kw = {"client_cert": cert}
    if mechanism:
        kw.update(user=user, password=password)
    got = _confluent_round_trip(confluent(secure, protocol, mechanism, **kw), topic)
    assert got == [f"c{i}".encode() for i in range(5)]


@pytest.mark.parametrize(("protocol", "mechanism", "cert"), [
    ("SSL", None, True),
    ("SASL_SSL", "SCRAM-SHA-256", False),
])
def test_aiokafka(secure, protocol, mechanism, cert):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic("aio")
    kw = {"client_cert": cert}
    if mechanism:
        kw.update(user="carol", password="carol-secret")

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**aiokafka_kwargs(secure, protocol, mechanism, **kw))
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest",
                             **aiokafka_kwargs(secure, protocol, mechanism, **kw))
        await c.start()
        got = []
        try:
            async with asyncio.timeout(20):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 5:
                        break
        finally:
            await c.stop()
        return got

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


@pytest.mark.parametrize(("protocol", "mechanism", "cert"), [
    ("SSL", None, True),
    ("SASL_SSL", "SCRAM-SHA-256", False),  # librdkafka 2.0's SCRAM final nonce quirk
])
def test_kcat(secure, kcat, protocol, mechanism, cert):
    topic = _topic("kcat")
    kw = {"client_cert": cert, "user": "carol", "password": "carol-secret"}
    args = kcat_args(secure, protocol, mechanism, **kw)
    p = run_kcat([*args, "-t", topic, "-P"], input=b"k1\nk2\nk3\n")
    assert p.returncode == 0, p.stderr.decode()[-1000:]
    c = run_kcat([*args, "-t", topic, "-C", "-o", "beginning", "-c", "3", "-e"])
    assert c.returncode == 0, c.stderr.decode()[-1000:]
    assert c.stdout.decode().split() == ["k1", "k2", "k3"]


def _java_args(props: dict[str, str]) -> list[str]:
    out = []
    for k, v in props.items():
        out += ["--prop", f"{k}={v}"]
    return out


@pytest.mark.java
@pytest.mark.parametrize(("protocol", "mechanism", "cert"), [
    ("SSL", None, True),
    ("SASL_SSL", "SCRAM-SHA-512", False),
])
def test_java_client(secure, java_client, protocol, mechanism, cert):
    topic = _topic("java")
    props = java_props(secure, protocol, mechanism, "carol", "carol-secret", client_cert=cert)
    bootstrap = secure.bootstrap(protocol)
    r = run_java_client(java_client, "produce", "--bootstrap", bootstrap, "--topic", topic,
                        "--count", "5", *_java_args(props))
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_java_client(java_client, "consume", "--bootstrap", bootstrap, "--topic", topic,
                        "--count", "5", "--from-beginning", *_java_args(props))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.lines[-1] == "consumed 5"


@pytest.mark.java
def test_wrong_password_fails_and_writes_nothing(secure, java_client):
    topic = _topic("wrong")
    before = secure.log_text().count("Failed authentication with /127.0.0.1")
    # confluent-kafka: an authentication error, nothing delivered
    from confluent_kafka import Producer

    errors = []
    conf = confluent(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "wrong")
    p = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": 3000})
    p.produce(topic, b"must not be written")
    p.flush(10)
    assert any("SASL authentication error" in e.str() for e in errors), errors
    assert any("invalid credentials with SASL mechanism SCRAM-SHA-256" in e.str()
               for e in errors)
    # the Java client: SaslAuthenticationException with Kafka's message
    props = java_props(secure, "SASL_SSL", "PLAIN", "alice", "wrong")
    r = run_java_client(java_client, "produce", "--bootstrap", secure.bootstrap("SASL_SSL"),
                        "--topic", topic, "--count", "1", "--timeout-ms", "5000",
                        *_java_args(props))
    assert r.returncode != 0
    assert "Authentication failed: Invalid username or password" in r.stdout + r.stderr
    # kafka-python: the producer never gets metadata
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError):
        kp = KafkaProducer(**kafka_python(secure, "SASL_PLAINTEXT", "PLAIN", "alice", "bad"),
                           max_block_ms=3000, api_version=(2, 8))
        kp.send(topic, b"x").get(5)
    assert _end_offset(secure, topic) == 0
    lines = [ln for ln in secure.log_text().splitlines()
             if "Failed authentication with /127.0.0.1" in ln][before:]
    assert lines
    assert all(re.search(r"Failed authentication with /127\.0\.0\.1 \(channelId=\S+\) \(", ln)
               for ln in lines)


def test_josef_tools_over_sasl_ssl(secure, tmp_path):
    import subprocess
    import sys

    from tests.integration.harness import REPO_ROOT

    cfg = tmp_path / "client.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in java_props(
        secure, "SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret").items()))
    topic = _topic("tools")

    def josef(*args, input=None):
        return subprocess.run([sys.executable, "-m", "broker.cli", *args], input=input,
                              capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)

    r = josef("topics", "--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config",
              str(cfg), "--create", "--topic", topic, "--partitions", "2")
    assert r.returncode == 0, r.stderr
    r = josef("console-producer", "--bootstrap-server", secure.bootstrap("SASL_SSL"),
              "--command-config", str(cfg), "--topic", topic, input="a\nb\n")
    assert r.returncode == 0, r.stderr
    r = josef("console-consumer", "--bootstrap-server", secure.bootstrap("SASL_SSL"),
              "--consumer.config", str(cfg), "--topic", topic, "--from-beginning",
              "--max-messages", "2", "--timeout-ms", "10000")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["a", "b"]
    bad = tmp_path / "bad.properties"
    bad.write_text(cfg.read_text().replace("carol-secret", "nope"))
    r = josef("topics", "--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config",
              str(bad), "--list")
    assert r.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED" in r.stderr


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"), ("SSL", None)])
def test_inter_broker_connect(secure, listener, mechanism):
    """broker.security.inter_broker: the client side other brokers use."""
    from broker.config import KafkaConfig
    from broker.security.inter_broker import (
        InterBrokerAuthenticationError,
        inter_broker_connect,
    )
    from common.properties import load_properties
    from protocol import api
    from tests.integration.secure_broker import _jaas

    props = dict(load_properties(secure.process.properties_path))
    props["inter.broker.listener.name"] = listener
    if mechanism:
        props["sasl.mechanism.inter.broker.protocol"] = mechanism
        props[f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"] = \
            _jaas(mechanism, "carol" if "SCRAM" in mechanism else "admin",
                  "carol-secret" if "SCRAM" in mechanism else "admin-secret")
    else:  # SSL: present our certificate (the broker only requests it)
        props.update({"ssl.keystore.location": str(secure.certs.files["client.p12"])})
    config = KafkaConfig(props)
    host, port = "127.0.0.1", secure.ports[listener]

    async def run():
        from broker.security.inter_broker import _round_trip

        reader, writer = await inter_broker_connect(config, host, port, timeout=20)
        try:
            req = api.API_KEYS[3].request_cls(topics=[])
            resp = await _round_trip(reader, writer, 3, 9, 99, "test", req)
            assert resp.brokers and resp.cluster_id
        finally:
            writer.close()
        if mechanism:  # wrong credentials are an InterBrokerAuthenticationError
            key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
            bad = KafkaConfig({**props, key: _jaas(mechanism, "admin", "nope")})
            with pytest.raises(InterBrokerAuthenticationError):
                await inter_broker_connect(bad, host, port, timeout=20)

    asyncio.run(run())


@pytest.mark.java
def test_delegation_tokens(secure, java_client):
    """KIP-48: alice creates a token; the Java client authenticates with it (SCRAM,
    tokenauth=true) and produces as alice; a token session may not create tokens; renew,
    describe, expire; an expired token no longer authenticates."""
    import base64

    from client.connection import KafkaClient, ToolError
    from protocol.errors import ErrorCode

    alice = java_props(secure, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
    with KafkaClient(secure.bootstrap("SASL_PLAINTEXT"), security=alice) as c:
        t = c.request(38, {"owner_principal_type": None, "owner_principal_name": None,
                           "renewers": [{"principal_type": "User", "principal_name": "carol"}],
                           "max_lifetime_ms": -1})
        assert t.error_code == 0 and t.principal_name == "alice" and len(t.token_id) == 22
        assert t.expiry_timestamp_ms <= t.max_timestamp_ms
        desc = c.request(41, {"owners": None})
        assert [d.token_id for d in desc.tokens] == [t.token_id]
    with KafkaClient(secure.bootstrap("PLAINTEXT")) as c:  # not on PLAINTEXT
        assert c.request(41, {"owners": None}).error_code == \
            ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    password = base64.b64encode(bytes(t.hmac)).decode()
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{t.token_id}" password="{password}" tokenauth="true";')
    token_props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                   "sasl.jaas.config": jaas}
    topic = _topic("token")
    r = run_java_client(java_client, "produce", "--bootstrap", secure.bootstrap("SASL_PLAINTEXT"),
                        "--topic", topic, "--count", "3", *_java_args(token_props))
    assert r.returncode == 0, r.stderr[-2000:]
    with KafkaClient(secure.bootstrap("SASL_PLAINTEXT"), security=token_props) as c:
        again = c.request(38, {"owner_principal_type": None, "owner_principal_name": None,
                               "renewers": [], "max_lifetime_ms": -1})
        assert again.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    carol = java_props(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret")
    with KafkaClient(secure.bootstrap("SASL_PLAINTEXT"), security=carol) as c:
        renewed = c.request(39, {"hmac": t.hmac, "renew_period_ms": 60_000})
        assert renewed.error_code == 0
        assert c.request(40, {"hmac": b"nope", "expiry_time_period_ms": -1}).error_code == \
            ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        assert c.request(40, {"hmac": t.hmac, "expiry_time_period_ms": -1}).error_code == 0
    with pytest.raises(ToolError, match="SASL_AUTHENTICATION_FAILED"):
        KafkaClient(secure.bootstrap("SASL_PLAINTEXT"), security=token_props).close()


def test_dynamic_keystore_reload(secure):
    """KIP-226: IncrementalAlterConfigs of listener.name.ssl.ssl.keystore.location gives new
    TLS connections the new certificate; a keystore with another DN is refused."""
    import hashlib
    import socket
    import ssl

    from client.connection import KafkaClient
    from protocol.errors import ErrorCode

    def served_cert() -> bytes:
        ctx = ssl.create_default_context(cafile=str(secure.certs.ca_pem))
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return hashlib.sha256(s.getpeercert(binary_form=True)).digest()

    before = served_cert()
    renewed = secure.certs.leaf("server-renewed", "localhost", "Brokers", server=True)
    other = secure.certs.leaf("server-other", "otherhost", "Brokers", server=True)
    key = "listener.name.ssl.ssl.keystore.location"

    def alter(path) -> int:
        with KafkaClient(secure.bootstrap()) as c:
            r = c.request(44, {"resources": [{"resource_type": 4, "resource_name": "0",
                                              "configs": [{"name": key, "config_operation": 0,
                                                           "value": str(path)}]}],
                               "validate_only": False})
            return r.responses[0].error_code

    assert alter(other["p12"]) == ErrorCode.INVALID_CONFIG
    assert served_cert() == before
    assert alter(renewed["p12"]) == 0
    deadline = time.monotonic() + 10
    while served_cert() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served_cert() != before
