"""A broker with every security protocol, and client settings for each stock client.

``SecureBroker(directory, props)`` runs a ``BrokerProcess`` with four listeners on
127.0.0.1 (ports picked here): ``PLAINTEXT`` (the harness probes it), ``SSL`` (client
certificates requested), ``SASL_PLAINTEXT`` and ``SASL_SSL`` (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512, OAUTHBEARER with the unsecured validator). PLAIN users come from the JAAS
config: ``admin``/``admin-secret`` and ``alice``/``alice-secret``; SCRAM users are made with
:meth:`SecureBroker.add_scram_user` (``josef configs`` over SASL as admin).

Client settings: :func:`kafka_python`, :func:`confluent`, :func:`aiokafka_kwargs`,
:func:`kcat_args`, :func:`java_props` take ``(broker, protocol, mechanism=None, user=...,
password=..., client_cert=False)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.integration.harness import REPO_ROOT, BrokerProcess, free_port
from tests.tls_certs import Certs, make_certs

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="admin";')
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class SecureBroker:
    def __init__(self, directory: Path, props: dict[str, str] | None = None,
                 certs: Certs | None = None) -> None:
        directory = Path(directory)
        self.certs = certs or make_certs(directory / "certs")
        self.ports = {p: free_port() for p in PROTOCOLS}
        c = self.certs
        base = {
            "listeners": ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items()),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(c.server_p12),
            "ssl.keystore.password": c.password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(c.ca_pem),
            "listener.name.ssl.ssl.client.auth": "requested",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "connection.failed.authentication.delay.ms": "20",
            "delegation.token.secret.key": "token-secret-for-tests",
        }
        base.update(props or {})
        self.process = BrokerProcess(directory / "broker", base)
        self.process.port = self.ports["PLAINTEXT"]

    def start(self) -> SecureBroker:
        self.process.start()
        return self

    def stop(self) -> None:
        self.process.stop()

    def bootstrap(self, protocol: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def log_text(self) -> str:
        return self.process.log_text()

    def client_props(self, protocol: str, mechanism: str | None = None, user: str = "admin",
                     password: str = "admin-secret", client_cert: bool = False
                     ) -> dict[str, str]:
        """Kafka client properties (as for the Java client or ``--command-config``)."""
        return java_props(self, protocol, mechanism, user, password, client_cert)

    def add_scram_user(self, user: str, password: str, iterations: int = 4096) -> None:
        import subprocess

        cfg = Path(self.process.dir) / f"admin-{user}.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in
                               self.client_props("SASL_PLAINTEXT", "PLAIN").items()))
        mechs = ",".join(f"{m}=[iterations={iterations},password={password}]"
                         for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"))
        proc = subprocess.run(
            [sys.executable, "-m", "broker.cli", "configs", "--bootstrap-server",
             self.bootstrap("SASL_PLAINTEXT"), "--command-config", str(cfg), "--alter",
             "--entity-type", "users", "--entity-name", user, "--add-config", mechs],
            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False)
        assert proc.returncode == 0, proc.stderr


def _jaas(mechanism: str, user: str, password: str) -> str:
    if mechanism == "PLAIN":
        module = "org.apache.kafka.common.security.plain.PlainLoginModule"
    elif mechanism == "OAUTHBEARER":
        return ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'unsecuredLoginStringClaim_sub="{user}";')
    else:
        module = "org.apache.kafka.common.security.scram.ScramLoginModule"
    return f'{module} required username="{user}" password="{password}";'


def java_props(b: SecureBroker, protocol: str, mechanism: str | None = None,
               user: str = "admin", password: str = "admin-secret",
               client_cert: bool = False) -> dict[str, str]:
    props = {"security.protocol": protocol}
    if "SSL" in protocol:
        props.update({"ssl.truststore.type": "PEM",
                      "ssl.truststore.location": str(b.certs.ca_pem)})
        if client_cert:
            props.update({"ssl.keystore.type": "PKCS12",
                          "ssl.keystore.location": str(b.certs.files["client.p12"]),
                          "ssl.keystore.password": b.certs.password})
    if "SASL" in protocol:
        props.update({"sasl.mechanism": mechanism,
                      "sasl.jaas.config": _jaas(mechanism, user, password)})
    return props


def kafka_python(b: SecureBroker, protocol: str, mechanism: str | None = None,
                 user: str = "admin", password: str = "admin-secret",
                 client_cert: bool = False) -> dict:
    kw = {"bootstrap_servers": b.bootstrap(protocol), "security_protocol": protocol}
    if "SSL" in protocol:
        kw["ssl_cafile"] = str(b.certs.ca_pem)
        if client_cert:
            kw["ssl_certfile"] = str(b.certs.files["client-cert.pem"])
            kw["ssl_keyfile"] = str(b.certs.files["client-key.pem"])
    if "SASL" in protocol:
        kw.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                  sasl_plain_password=password)
    return kw


def confluent(b: SecureBroker, protocol: str, mechanism: str | None = None,
              user: str = "admin", password: str = "admin-secret",
              client_cert: bool = False) -> dict:
    conf = {"bootstrap.servers": b.bootstrap(protocol), "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(b.certs.ca_pem)
        if client_cert:
            conf["ssl.certificate.location"] = str(b.certs.files["client-cert.pem"])
            conf["ssl.key.location"] = str(b.certs.files["client-key.pem"])
    if "SASL" in protocol:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                     "sasl.password": password})
        if mechanism == "OAUTHBEARER":
            del conf["sasl.username"], conf["sasl.password"]
            conf["sasl.oauthbearer.config"] = f"principal={user}"
            conf["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
    return conf


def kcat_args(b: SecureBroker, protocol: str, mechanism: str | None = None,
              user: str = "admin", password: str = "admin-secret",
              client_cert: bool = False) -> list[str]:
    out = ["-b", b.bootstrap(protocol)]
    for k, v in confluent(b, protocol, mechanism, user, password, client_cert).items():
        if k != "bootstrap.servers":
            out += ["-X", f"{k}={v}"]
    return out


def aiokafka_kwargs(b: SecureBroker, protocol: str, mechanism: str | None = None,
                    user: str = "admin", password: str = "admin-secret",
                    client_cert: bool = False) -> dict:
    kw: dict = {"bootstrap_servers": b.bootstrap(protocol), "security_protocol": protocol}
    if "SSL" in protocol:
        from aiokafka.helpers import create_ssl_context
        if client_cert:
            kw["ssl_context"] = create_ssl_context(
                cafile=str(b.certs.ca_pem), certfile=str(b.certs.files["client-cert.pem"]),
                keyfile=str(b.certs.files["client-key.pem"]))
        else:
            kw["ssl_context"] = create_ssl_context(cafile=str(b.certs.ca_pem))
    if "SASL" in protocol:
        kw.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                  sasl_plain_password=password)
    return kw
