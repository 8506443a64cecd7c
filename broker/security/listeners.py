"""Per-listener security: the protocol, the TLS context, the SASL mechanisms and their JAAS
entries, and the ``Session`` each connection gets.

Built from the broker config (``ListenerSecurity.from_config``) with Kafka's per-listener
overrides (``listener.name.<l>.<key>``, ``listener.name.<l>.<mechanism>.sasl.jaas.config``).
A config the listener cannot work with raises ``ConfigError`` naming the key (as Kafka's
``ChannelBuilders`` fails startup): SASL mechanisms other than PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512 and OAUTHBEARER (GSSAPI, Kafka's default, is not supported), PLAIN without a
``PlainLoginModule`` JAAS entry, a JAAS entry of the wrong login module or bad syntax, an
unusable keystore/truststore, bad ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from typing import Any

from broker.config import Endpoint
from broker.security.authenticator import SaslServerAuthenticator
from broker.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    SslPrincipalMapper,
    dn_of_certificate,
)
from broker.security.sasl import SUPPORTED_MECHANISMS
from common.config_error import ConfigError
from common.security.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    JaasEntry,
    parse_jaas_config,
)
from common.security.ssl_factory import SslConfig, SslConfigError, load_keystore, server_context

__all__ = ["ListenerSecurity", "Session"]

log = logging.getLogger("broker.security")

_LOGIN_MODULES = {"PLAIN": PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
                  "SCRAM-SHA-512": SCRAM_LOGIN_MODULE, "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE}


@dataclass(eq=False)
class Session:
    """Who is on the other end of one connection (``ctx.session`` in handlers)."""

    principal: KafkaPrincipal
    client_address: Any
    listener: str
    security_protocol: str
    authenticator: SaslServerAuthenticator | None = None
    #: True once nothing is left to check per request (SSL principal taken, no SASL expiry)
    settled: bool = False

    @property
    def client_host(self) -> str:
        a = self.client_address
        return str(a[0]) if isinstance(a, tuple) and a else str(a)


@dataclass(eq=False)
class ListenerSecurity:
    name: str
    protocol: str
    ssl_config: SslConfig | None = None
    ssl_context: Any = None  # ssl.SSLContext for SSL/SASL_SSL listeners
    subject: str | None = None  # keystore leaf subject/SAN, checked on reload
    san: tuple[str, ...] = ()
    mechanisms: list[str] = field(default_factory=list)
    jaas: dict[str, JaasEntry] = field(default_factory=dict)
    reauth_ms: dict[str, int] = field(default_factory=dict)
    mapper: SslPrincipalMapper | None = None

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_config(cls, config, endpoint: Endpoint) -> ListenerSecurity:
        name, protocol = endpoint.listener_name, endpoint.security_protocol
        sec = cls(name, protocol)
        prefix = f"listener.name.{name.lower()}."

        def key_name(key: str, mechanism: str | None = None) -> str:
            overrides = config.listener_overrides.get(name, {})
            if mechanism and f"{mechanism.lower()}.{key}" in overrides:
                return f"{prefix}{mechanism.lower()}.{key}"
            return prefix + key if key in overrides else key

        if sec.uses_ssl:
            sec.ssl_config = SslConfig.from_getter(lambda k: config.listener_get(name, k))
            try:
                material = load_keystore(sec.ssl_config)
                sec.ssl_context = server_context(sec.ssl_config, material)
            except SslConfigError as e:
                shown = config.listener_get(name, e.key) if e.key in _plain_keys() \
                    else "[hidden]"
                raise ConfigError(key_name(e.key), shown, "a usable key/trust store",
                                  e.reason) from None
            sec.subject, sec.san = material.subject, material.san
            rules = config.listener_get(name, "ssl.principal.mapping.rules")
            try:
                sec.mapper = SslPrincipalMapper(rules)
            except ValueError as e:
                raise ConfigError(key_name("ssl.principal.mapping.rules"), rules,
                                  "DEFAULT and RULE:pattern/replacement/[LU] entries",
                                  str(e)) from None
        if sec.uses_sasl:
            mechanisms = [m.strip().upper() for m in
                          config.listener_get(name, "sasl.enabled.mechanisms") if m.strip()]
            unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
            if not mechanisms or unsupported:
                raise ConfigError(key_name("sasl.enabled.mechanisms"), ",".join(mechanisms),
                                  ", ".join(SUPPORTED_MECHANISMS),
                                  "no SASL mechanism enabled" if not mechanisms else
                                  f"{', '.join(unsupported)} is not supported by Josef "
                                  "(GSSAPI/Kerberos is not implemented)")
            sec.mechanisms = mechanisms
            for mech in mechanisms:
                text = config.listener_get(name, "sasl.jaas.config", mechanism=mech)
                key = key_name("sasl.jaas.config", mech)
                if text is None:
                    if mech == "PLAIN":
                        raise ConfigError(f"{prefix}plain.sasl.jaas.config", None,
                                          f"a {PLAIN_LOGIN_MODULE} entry with user_<name>="
                                          "\"<password>\" options",
                                          f"SASL/PLAIN on listener {name} has no JAAS config")
                    continue
                try:
                    entry = parse_jaas_config(text)[0]
                except JaasConfigError as e:
                    raise ConfigError(key, "[hidden]", "JAAS syntax: <LoginModule> required "
                                      "key=\"value\" ...;", str(e)) from None
                if entry.login_module != _LOGIN_MODULES[mech]:
                    if key.endswith(f".{mech.lower()}.sasl.jaas.config"):
                        raise ConfigError(key, "[hidden]", _LOGIN_MODULES[mech],
                                          f"{entry.login_module} does not serve SASL/{mech}")
                    if mech == "PLAIN":
                        raise ConfigError(f"{prefix}plain.sasl.jaas.config", None,
                                          PLAIN_LOGIN_MODULE,
                                          f"SASL/PLAIN on listener {name} has no JAAS config "
                                          f"({key} is a {entry.login_module} entry)")
                    continue  # a shared entry for another mechanism
                sec.jaas[mech] = entry
                sec.reauth_ms[mech] = int(config.listener_get(
                    name, "connections.max.reauth.ms", mechanism=mech) or 0)
            for mech in mechanisms:
                sec.reauth_ms.setdefault(mech, int(config.listener_get(
                    name, "connections.max.reauth.ms", mechanism=mech) or 0))
        return sec

    # ---- connections -----------------------------------------------------------------------
    def new_session(self, client_address: Any, credentials, time_ms) -> Session:
        session = Session(ANONYMOUS, client_address, self.name, self.protocol)
        if self.uses_sasl:
            session.authenticator = SaslServerAuthenticator(
                self.name, self.mechanisms, credentials,
                reauth_ms=lambda m: self.reauth_ms.get(m, 0), time_ms=time_ms)
        return session

    def ssl_principal(self, ssl_object) -> KafkaPrincipal:
        """``User:<mapped subject DN>`` of the client certificate (ANONYMOUS without one)."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return ANONYMOUS
        dn = dn_of_certificate(der)
        try:
            return KafkaPrincipal("User", self.mapper.name(dn) if self.mapper else dn)
        except NoMatchingRule as e:
            log.warning("listener %s: %s; using the DN", self.name, e)
            return KafkaPrincipal("User", dn)

    def plain_password_ok(self, username: str, password: str) -> bool:
        entry = self.jaas.get("PLAIN")
        if entry is None:
            return False
        expected = entry.options.get(f"user_{username}")
        return expected is not None and hmac.compare_digest(expected.encode(),
                                                            password.encode())

    def oauth_options(self) -> dict[str, str]:
        entry = self.jaas.get("OAUTHBEARER")
        return dict(entry.options) if entry is not None else {}

    def check_ssl(self, config_getter):
        """Build (without installing) the context new ``ssl.*`` values give: (SslConfig,
        context, material). Raises SslConfigError, or ValueError when the certificate's
        subject or SANs changed (unless ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``)."""
        cfg = SslConfig.from_getter(config_getter)
        material = load_keystore(cfg)
        if material.subject != self.subject and not config_getter("ssl.allow.dn.changes"):
            raise ValueError(f"Keystore DistinguishedName does not match: existing "
                             f"{self.subject}, new {material.subject}")
        if material.san != self.san and not config_getter("ssl.allow.san.changes"):
            raise ValueError(f"Keystore SubjectAltNames do not match: existing {self.san}, "
                             f"new {material.san}")
        return cfg, server_context(cfg, material), material

    def reload_ssl(self, config_getter) -> None:
        """KIP-226: install the context new ``ssl.*`` values give; new connections use it
        (open ones keep theirs). Raises as :meth:`check_ssl`."""
        cfg, context, material = self.check_ssl(config_getter)
        self.ssl_config, self.ssl_context = cfg, context
        self.subject, self.san = material.subject, material.san


def _plain_keys() -> tuple[str, ...]:
    return ("ssl.keystore.location", "ssl.keystore.type", "ssl.truststore.location",
            "ssl.truststore.type", "ssl.enabled.protocols", "ssl.cipher.suites",
            "ssl.client.auth")
