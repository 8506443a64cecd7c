"""SSL and SASL for Josef's own clients (the ``josef`` tools, test harnesses, inter-broker
connections), configured with Kafka's client keys as in a ``--command-config`` file:

    security.protocol=SASL_SSL
    ssl.truststore.type=PEM                 # or PKCS12 (+ ssl.truststore.password)
    ssl.truststore.location=/etc/kafka/ca.pem
    ssl.keystore.type=PKCS12                # client certificate, if the broker wants one
    ssl.keystore.location=/etc/kafka/client.p12
    ssl.keystore.password=secret
    ssl.endpoint.identification.algorithm=  # empty: do not check the host name
    sasl.mechanism=SCRAM-SHA-512            # PLAIN, SCRAM-SHA-256/512, OAUTHBEARER
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";

SCRAM with ``tokenauth="true"`` logs in with a delegation token (username = token id,
password = token HMAC in base64). OAUTHBEARER builds an unsecured JWS from the
``unsecuredLoginStringClaim_<claim>`` / ``unsecuredLoginListClaim_<claim>`` /
``unsecuredLoginLifetimeSeconds`` options, as Kafka's unsecured login handler does.

:class:`ClientSecurity` gives the ``ssl.SSLContext`` (built by ``broker.security
.ssl_factory``) and, per connection, a SASL client: ``first() -> bytes`` then
``respond(challenge) -> bytes | None`` until None (done). :func:`load_client_properties`
reads a properties file.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

__all__ = ["ClientSecurity", "SaslClient", "load_client_properties"]


class SaslClient:
    """One SASL exchange, client side (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER)."""

    def __init__(self, mechanism: str, options: Mapping[str, str]) -> None:
        self.mechanism = mechanism
        self.options = dict(options)
        self.complete = False
        self._scram = None
        self._step = 0
        self.error: str | None = None

    def first(self) -> bytes:
        m = self.mechanism
        if m == "PLAIN":
            return f"\x00{self._opt('username')}\x00{self._opt('password')}".encode()
        if m.startswith("SCRAM-"):
            from common.security.scram_client import ScramClient

            token = self.options.get("tokenauth", "false").lower() == "true"
            self._scram = ScramClient(m, self._opt("username"), self._opt("password"),
                                      token_auth=token)
            return self._scram.first()
        if m == "OAUTHBEARER":
            from common.security.oauthbearer_client import client_initial_response
            return client_initial_response(self._oauth_token())
        raise ValueError(f"unsupported SASL mechanism {m}")

    def respond(self, challenge: bytes) -> bytes | None:
        """The next token to send for ``challenge``, or None when the exchange is over."""
        self._step += 1
        m = self.mechanism
        if m.startswith("SCRAM-"):
            if self._step == 1:
                return self._scram.final(challenge)
            self._scram.verify(challenge)
        elif m == "OAUTHBEARER" and challenge:
            self.error = bytes(challenge).decode("utf-8", "replace")
            return b"\x01"  # acknowledge the error; the server then fails the exchange
        self.complete = True
        return None

    def _opt(self, name: str) -> str:
        value = self.options.get(name)
        if value is None:
            raise ValueError(f"sasl.jaas.config has no {name} option for {self.mechanism}")
        return value

    def _oauth_token(self) -> str:
        from common.security.oauthbearer_client import unsecured_token

        claims: dict[str, Any] = {}
        for k, v in self.options.items():
            if k.startswith("unsecuredLoginStringClaim_"):
                claims[k.split("_", 1)[1]] = v
            elif k.startswith("unsecuredLoginNumberClaim_"):
                claims[k.split("_", 1)[1]] = float(v) if "." in v else int(v)
            elif k.startswith("unsecuredLoginListClaim_"):
                claims[k.split("_", 1)[1]] = [s for s in v[1:].split(v[0])] if v else []
        principal_claim = self.options.get("unsecuredLoginPrincipalClaimName", "sub")
        principal = claims.pop(principal_claim, None)
        if principal is None:
            raise ValueError("sasl.jaas.config has no unsecuredLoginStringClaim_sub option")
        lifetime = float(self.options.get("unsecuredLoginLifetimeSeconds", "3600"))
        if principal_claim != "sub":
            claims[principal_claim] = principal
        return unsecured_token(principal, lifetime, **claims)


class ClientSecurity:
    """A client's security settings from Kafka client properties (see the module doc)."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        props = {k: str(v) for k, v in (props or {}).items()}
        self.props = props
        self.protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if self.protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"unknown security.protocol {self.protocol}")
        self.mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        self._context = None
        self.jaas_options: dict[str, str] = {}
        if self.uses_sasl:
            from common.security.jaas import parse_jaas_config

            text = props.get("sasl.jaas.config")
            if not text:
                raise ValueError("sasl.jaas.config is required for SASL")
            self.jaas_options = parse_jaas_config(text)[0].options
            if self.mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"):
                raise ValueError(f"unsupported sasl.mechanism {self.mechanism}")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self):
        if self._context is None:
            from common.security.ssl_factory import SslConfig, client_context

            def get(key: str):
                v = self.props.get(key)
                if v is None:
                    return {"ssl.endpoint.identification.algorithm": "https"}.get(key)
                if key in ("ssl.enabled.protocols", "ssl.cipher.suites"):
                    return [s.strip() for s in v.split(",") if s.strip()]
                return v

            self._context = client_context(SslConfig.from_getter(get))
        return self._context

    def sasl_client(self) -> SaslClient:
        return SaslClient(self.mechanism, self.jaas_options)


def load_client_properties(path: str) -> dict[str, str]:
    """A client properties file (Java properties syntax) as a dict."""
    from common.properties import load_properties
    return dict(load_properties(path))


def token_password(hmac_bytes: bytes) -> str:
    """A delegation token's SCRAM password: its HMAC in base64 (Kafka's tokens)."""
    return base64.b64encode(hmac_bytes).decode()
