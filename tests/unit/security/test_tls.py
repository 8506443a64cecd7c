"""SSL contexts from Kafka's ssl.* keys (PKCS12, PEM file, inline PEM, errors naming the
key), listener security from the broker config, and TlsServerProtocol (handshake off the
loop, random bytes, close_notify)."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from broker.config import KafkaConfig
from broker.security.listeners import ListenerSecurity
from broker.security.tls_transport import TlsServerProtocol
from common.config_error import ConfigError
from common.security.ssl_factory import (
    SslConfig,
    SslConfigError,
    client_context,
    iana_to_openssl,
    load_keystore,
    server_context,
)
from tests.tls_certs import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_keystores(certs):
    p12 = SslConfig(keystore_type="PKCS12", keystore_location=str(certs.server_p12),
                    keystore_password=certs.password)
    pem = SslConfig(keystore_type="PEM", keystore_location=str(certs.server_pem),
                    key_password=certs.key_password)
    inline = SslConfig(keystore_type="PEM",
                       keystore_key=certs.files["server-key.pem"].read_text(),
                       keystore_certificate_chain=certs.files["server-cert.pem"].read_text())
    subjects = {load_keystore(c).subject for c in (p12, pem, inline)}
    assert len(subjects) == 1 and "CN=localhost" in subjects.pop()
    assert load_keystore(p12).san == ("127.0.0.1", "localhost")
    # "JKS" (Kafka's default type) works when the file is really PKCS12
    load_keystore(SslConfig(keystore_location=str(certs.server_p12),
                            keystore_password=certs.password))


@pytest.mark.parametrize(("cfg", "key"), [
    (dict(keystore_type="PKCS12", keystore_location="/nonexistent"), "ssl.keystore.location"),
    (dict(keystore_type="PKCS12", keystore_password="wrong"), "ssl.keystore.location"),
    (dict(keystore_type="PEM", keystore_password="x"), "ssl.keystore.password"),
    (dict(keystore_type="PEM", key_password="wrong"), "ssl.keystore.location"),
    (dict(keystore_type="PKCS12", keystore_key="x", keystore_certificate_chain="y"),
     "ssl.keystore.type"),
    (dict(keystore_location=None), "ssl.keystore.location"),
])
def test_keystore_errors_name_the_key(certs, cfg, key):
    base = {"keystore_location": str(certs.server_p12 if cfg.get("keystore_type") != "PEM"
                                      else certs.server_pem),
            "keystore_password": certs.password}
    base.update(cfg)
    if base.get("keystore_type") == "PEM" and "keystore_password" not in cfg:
        base["keystore_password"] = None
    with pytest.raises(SslConfigError) as info:
        load_keystore(SslConfig(**base))
    assert info.value.key == key


def test_cipher_names_and_protocols(certs):
    assert iana_to_openssl("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384") == \
        "ECDHE-RSA-AES256-GCM-SHA384"
    assert iana_to_openssl("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == \
        "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert iana_to_openssl("TLS_RSA_WITH_AES_128_CBC_SHA") == "AES128-SHA"
    base = dict(keystore_type="PKCS12", keystore_location=str(certs.server_p12),
                keystore_password=certs.password)
    ctx = server_context(SslConfig(**base, enabled_protocols=("TLSv1.2",),
                                   cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",)))
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(SslConfigError) as info:
        server_context(SslConfig(**base, cipher_suites=("TLS_NOPE_WITH_NOTHING",)))
    assert info.value.key == "ssl.cipher.suites"
    with pytest.raises(SslConfigError):
        server_context(SslConfig(**base, enabled_protocols=("SSLv3",)))


def test_listener_security_from_config(certs):
    props = {"listeners": "PLAINTEXT://:0,SSL://:0,SASL_SSL://:0",
             "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.server_p12),
             "ssl.keystore.password": certs.password,
             "listener.name.ssl.ssl.client.auth": "required",
             "listener.name.ssl.ssl.truststore.type": "PEM",
             "listener.name.ssl.ssl.truststore.location": str(certs.ca_pem),
             "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
             "sasl.enabled.mechanisms": "SCRAM-SHA-512",
             "listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms": "5000"}
    cfg = KafkaConfig(props)
    sec = {e.listener_name: ListenerSecurity.from_config(cfg, e) for e in cfg.listeners}
    assert sec["SSL"].ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert sec["SASL_SSL"].ssl_context.verify_mode == ssl.CERT_NONE
    assert sec["SASL_SSL"].mechanisms == ["SCRAM-SHA-512"]
    assert sec["SASL_SSL"].reauth_ms == {"SCRAM-SHA-512": 5000}
    assert sec["PLAINTEXT"].ssl_context is None


@pytest.mark.parametrize(("extra", "key"), [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": "bad"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER,KERBEROS"},
     "listener.name.sasl_plaintext.sasl.enabled.mechanisms"),
])
def test_bad_sasl_config_names_the_key(extra, key):
    cfg = KafkaConfig({"listeners": "SASL_PLAINTEXT://:0", **extra})
    with pytest.raises(ConfigError) as info:
        ListenerSecurity.from_config(cfg, cfg.listeners[0])
    assert info.value.key == key


def test_bad_keystore_in_config_names_the_listener_key(certs):
    cfg = KafkaConfig({"listeners": "SSL://:0", "listener.name.ssl.ssl.keystore.location":
                       "/missing.p12", "ssl.keystore.type": "PKCS12",
                       "ssl.keystore.password": "x"})
    with pytest.raises(ConfigError) as info:
        ListenerSecurity.from_config(cfg, cfg.listeners[0])
    assert info.value.key == "listener.name.ssl.ssl.keystore.location"


class _Echo(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.buf = bytearray(1 << 16)
        self.lost = asyncio.get_running_loop().create_future()
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, n):
        return memoryview(self.buf)

    def buffer_updated(self, n):
        self.transport.write(bytes(self.buf[:n]).upper())

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


async def test_tls_server_protocol(certs):
    sctx = server_context(SslConfig(keystore_type="PKCS12", keystore_location=str(
        certs.server_p12), keystore_password=certs.password))
    failures, apps = [], []

    def factory():
        app = _Echo()
        apps.append(app)
        return TlsServerProtocol(sctx, app, on_handshake_failed=lambda a, r: failures.append(r))

    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        cctx = client_context(SslConfig(truststore_type="PEM",
                                        truststore_location=str(certs.ca_pem)))
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                             server_hostname="localhost")
        assert apps[0].transport.get_extra_info("sslcontext") is sctx
        w.write(b"abc" * 100_000)
        assert await r.readexactly(300_000) == b"ABC" * 100_000
        w.close()
        await asyncio.wait_for(w.wait_closed(), 5)  # close_notify answered
        await asyncio.wait_for(apps[0].lost, 5)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x16\x03\x01garbage" * 50)
        reply = await asyncio.wait_for(r.read(), 5)  # OpenSSL's alert, then EOF
        assert reply == b"" or reply[0] == 0x15
        w.close()
        assert len(failures) == 1 and failures[0].startswith("SSL handshake failed")
    finally:
        server.close()
        await server.wait_closed()
