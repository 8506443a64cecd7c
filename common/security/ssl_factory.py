"""SSL contexts from Kafka's ``ssl.*`` keys (Kafka's ``DefaultSslEngineFactory``), with the
standard ``ssl`` module; PKCS12 stores are read with ``cryptography``.

Keystore (our certificate and private key):

* ``ssl.keystore.type=PKCS12`` + ``ssl.keystore.location`` + ``ssl.keystore.password``
  (the key's own password ``ssl.key.password`` is tried when it differs);
* ``ssl.keystore.type=PEM`` + ``ssl.keystore.location``: a file with the private key
  (PKCS#8, encrypted with ``ssl.key.password`` or not) and the certificate chain;
  ``ssl.keystore.password`` must not be set (Kafka's rule);
* ``ssl.keystore.type=PEM`` + ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``: the
  same inline (KIP-651);
* ``JKS`` (Kafka's default type): only readable when the file is in fact PKCS12 (what
  ``keytool`` writes since Java 9); a real JKS file is refused naming the key.

Truststore: ``ssl.truststore.type`` PKCS12 or PEM with ``ssl.truststore.location``, or PEM
inline in ``ssl.truststore.certificates``; none = the system's trusted CAs.

``ssl.client.auth`` required/requested/none -> CERT_REQUIRED/CERT_OPTIONAL/CERT_NONE;
``ssl.enabled.protocols`` -> the lowest and highest TLS version allowed;
``ssl.cipher.suites`` (Java/IANA names such as ``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384``, or
OpenSSL names) -> the TLS 1.2 cipher list (TLS 1.3 suites cannot be restricted through
Python's ``ssl`` and are accepted as they are); ``ssl.endpoint.identification.algorithm``
``https`` checks the server's host name on client contexts.

A bad value raises :class:`SslConfigError` naming the key (startup stops on it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["KeyMaterial", "SslConfig", "SslConfigError", "client_context", "load_keystore",
           "load_truststore", "server_context", "iana_to_openssl"]

_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}


class SslConfigError(ValueError):
    """``key`` has a value the SSL factory cannot use; the message says why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.reason = message


@dataclass(frozen=True)
class SslConfig:
    """The ``ssl.*`` values for one listener (or one client)."""

    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = None
    key_password: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification_algorithm: str | None = "https"

    @classmethod
    def from_getter(cls, get: Callable[[str], Any]) -> SslConfig:
        """Build from ``get(key)`` returning the parsed value of an ``ssl.*`` key."""
        def s(key: str) -> str | None:
            v = get(key)
            return None if v is None else str(v)

        protocols = get("ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"]
        ciphers = get("ssl.cipher.suites") or []
        return cls(
            keystore_type=(s("ssl.keystore.type") or "JKS").upper(),
            keystore_location=s("ssl.keystore.location"),
            keystore_password=s("ssl.keystore.password"),
            key_password=s("ssl.key.password"),
            keystore_certificate_chain=s("ssl.keystore.certificate.chain"),
            keystore_key=s("ssl.keystore.key"),
            truststore_type=(s("ssl.truststore.type") or "JKS").upper(),
            truststore_location=s("ssl.truststore.location"),
            truststore_password=s("ssl.truststore.password"),
            truststore_certificates=s("ssl.truststore.certificates"),
            client_auth=(s("ssl.client.auth") or "none").lower(),
            enabled_protocols=tuple(protocols if isinstance(protocols, list)
                                    else str(protocols).split(",")),
            cipher_suites=tuple(ciphers if isinstance(ciphers, list)
                                else [c for c in str(ciphers).split(",") if c]),
            endpoint_identification_algorithm=s("ssl.endpoint.identification.algorithm"))

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_key
                    or self.keystore_certificate_chain)


@dataclass(frozen=True)
class KeyMaterial:
    """A loaded keystore: PEM certificate chain, PEM private key (encrypted with
    ``key_password``) and the leaf certificate's subject DN and subject alternative names."""

    chain_pem: bytes
    key_pem: bytes
    key_password: bytes
    subject: str
    san: tuple[str, ...]


def _read(key: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SslConfigError(key, f"cannot read {path}: {e.strerror or e}") from None


def _pkcs12(key: str, data: bytes, passwords: list[str | None]):
    from cryptography.hazmat.primitives.serialization import pkcs12

    last: Exception | None = None
    for pw in passwords:
        try:
            return pkcs12.load_pkcs12(data, pw.encode() if pw is not None else None)
        except (ValueError, TypeError) as e:
            last = e
    raise SslConfigError(key, f"not a readable PKCS12 store (wrong password?): {last}")


def _material(key_obj, certs: list, key_name: str) -> KeyMaterial:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if key_obj is None:
        raise SslConfigError(key_name, "the keystore has no private key")
    if not certs:
        raise SslConfigError(key_name, "the keystore has no certificate")
    password = secrets.token_hex(16).encode()
    key_pem = key_obj.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.BestAvailableEncryption(password))
    chain_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    leaf = certs[0]
    try:
        ext = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        san = tuple(sorted(str(n.value) for n in ext.value))
    except x509.ExtensionNotFound:
        san = ()
    return KeyMaterial(chain_pem, key_pem, password, leaf.subject.rfc4514_string(), san)


def _pem_key(key_name: str, pem: bytes, password: str | None):
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(
            pem, password.encode() if password else None)
    except (ValueError, TypeError) as e:
        raise SslConfigError(key_name, f"cannot load the private key: {e}") from None


def _pem_certs(key_name: str, pem: bytes) -> list:
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise SslConfigError(key_name, f"no valid PEM certificate: {e}") from None
    return certs


def load_keystore(cfg: SslConfig) -> KeyMaterial:
    """Our certificate chain and key from the keystore settings; SslConfigError if unusable."""
    t = cfg.keystore_type
    if cfg.keystore_key or cfg.keystore_certificate_chain:
        if t != "PEM":
            raise SslConfigError("ssl.keystore.type", "ssl.keystore.key and "
                                 "ssl.keystore.certificate.chain need ssl.keystore.type=PEM")
        if cfg.keystore_location:
            raise SslConfigError("ssl.keystore.location", "cannot be set together with "
                                 "ssl.keystore.key / ssl.keystore.certificate.chain")
        if not cfg.keystore_key or not cfg.keystore_certificate_chain:
            missing = "ssl.keystore.key" if not cfg.keystore_key else \
                "ssl.keystore.certificate.chain"
            raise SslConfigError(missing, "both ssl.keystore.key and "
                                 "ssl.keystore.certificate.chain must be set")
        if cfg.keystore_password:
            raise SslConfigError("ssl.keystore.password", "SSL key store password cannot be "
                                 "specified with PEM format, only key password may be specified")
        key = _pem_key("ssl.keystore.key", cfg.keystore_key.encode(), cfg.key_password)
        return _material(key, _pem_certs("ssl.keystore.certificate.chain",
                                         cfg.keystore_certificate_chain.encode()),
                         "ssl.keystore.certificate.chain")
    if not cfg.keystore_location:
        raise SslConfigError("ssl.keystore.location", "an SSL listener needs a keystore "
                             "(ssl.keystore.location, or ssl.keystore.key and "
                             "ssl.keystore.certificate.chain with ssl.keystore.type=PEM)")
    data = _read("ssl.keystore.location", cfg.keystore_location)
    if t == "PEM":
        if cfg.keystore_password:
            raise SslConfigError("ssl.keystore.password", "SSL key store password cannot be "
                                 "specified with PEM format, only key password may be specified")
        key = _pem_key("ssl.keystore.location", data, cfg.key_password)
        return _material(key, _pem_certs("ssl.keystore.location", data),
                         "ssl.keystore.location")
    if t == "JKS" and data[:4] == b"\xfe\xed\xfe\xed":
        raise SslConfigError("ssl.keystore.type", "JKS key stores are not supported; convert "
                             "it to PKCS12 (keytool -importkeystore -deststoretype PKCS12) or PEM")
    if not cfg.keystore_password and t == "PKCS12":
        raise SslConfigError("ssl.keystore.password", "a PKCS12 key store needs a password")
    p12 = _pkcs12("ssl.keystore.location", data, [cfg.keystore_password, cfg.key_password])
    certs = [p12.cert.certificate] if p12.cert is not None else []
    certs += [c.certificate for c in p12.additional_certs]
    return _material(p12.key, certs, "ssl.keystore.location")


def load_truststore(cfg: SslConfig) -> str | None:
    """The trusted CA certificates as one PEM string, or None (use the system's)."""
    from cryptography.hazmat.primitives import serialization

    if cfg.truststore_certificates:
        if cfg.truststore_type != "PEM":
            raise SslConfigError("ssl.truststore.type",
                                 "ssl.truststore.certificates needs ssl.truststore.type=PEM")
        if cfg.truststore_location:
            raise SslConfigError("ssl.truststore.location", "cannot be set together with "
                                 "ssl.truststore.certificates")
        _pem_certs("ssl.truststore.certificates", cfg.truststore_certificates.encode())
        return cfg.truststore_certificates
    if not cfg.truststore_location:
        return None
    data = _read("ssl.truststore.location", cfg.truststore_location)
    if cfg.truststore_type == "PEM":
        if cfg.truststore_password:
            raise SslConfigError("ssl.truststore.password", "SSL trust store password cannot be "
                                 "specified for PEM format")
        _pem_certs("ssl.truststore.location", data)
        return data.decode("ascii", "replace")
    if cfg.truststore_type == "JKS" and data[:4] == b"\xfe\xed\xfe\xed":
        raise SslConfigError("ssl.truststore.type", "JKS trust stores are not supported; "
                             "convert it to PKCS12 or PEM")
    p12 = _pkcs12("ssl.truststore.location", data, [cfg.truststore_password, None, ""])
    certs = [c.certificate for c in p12.additional_certs]
    if p12.cert is not None:
        certs.insert(0, p12.cert.certificate)
    if not certs:
        raise SslConfigError("ssl.truststore.location", "the trust store has no certificate")
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs).decode()


def iana_to_openssl(name: str) -> str:
    """``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`` -> ``ECDHE-RSA-AES256-GCM-SHA384`` (names
    that are not IANA TLS 1.2 names pass through unchanged)."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, rest = name[4:].partition("_WITH_")
    kx_part = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-",
               "DHE_RSA": "DHE-RSA-", "DHE_DSS": "DHE-DSS-"}.get(kx)
    if kx_part is None:
        return name
    parts = rest.split("_")
    if parts[:1] == ["AES"] and len(parts) >= 3:
        bits, mode, mac = parts[1], parts[2], parts[3:] if len(parts) > 3 else []
        if mode == "GCM":
            return f"{kx_part}AES{bits}-GCM-{'-'.join(mac)}"
        if mode == "CBC":
            suffix = "-".join(mac)
            return f"{kx_part}AES{bits}-{suffix}" if suffix else f"{kx_part}AES{bits}"
    if parts[:2] == ["CHACHA20", "POLY1305"]:
        return f"{kx_part}CHACHA20-POLY1305"
    return name


def _protocols(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    try:
        versions = sorted(_VERSIONS[p.strip()] for p in cfg.enabled_protocols if p.strip())
    except KeyError as e:
        raise SslConfigError("ssl.enabled.protocols", f"unknown protocol {e.args[0]}") from None
    if not versions:
        raise SslConfigError("ssl.enabled.protocols", "no protocol enabled")
    try:
        ctx.minimum_version = versions[0]
        ctx.maximum_version = versions[-1]
    except (ValueError, ssl.SSLError) as e:
        raise SslConfigError("ssl.enabled.protocols", str(e)) from None
    tls12 = [iana_to_openssl(c.strip()) for c in cfg.cipher_suites
             if c.strip() and not c.strip().startswith(("TLS_AES_", "TLS_CHACHA20_"))]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise SslConfigError("ssl.cipher.suites", "no usable cipher suite in "
                                 + ",".join(cfg.cipher_suites)) from None


def _load_chain(ctx: ssl.SSLContext, material: KeyMaterial) -> None:
    """``SSLContext.load_cert_chain`` wants files: write the PEMs to a private temporary
    directory (mode 0700, files 0600, key encrypted), load, remove."""
    tmp = tempfile.mkdtemp(prefix="josef-tls-")
    try:
        path = os.path.join(tmp, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(material.key_pem)
            f.write(material.chain_pem)
        try:
            ctx.load_cert_chain(path, password=material.key_password)
        except ssl.SSLError as e:
            raise SslConfigError("ssl.keystore.location",
                                 f"the key does not match the certificate: {e}") from None
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)


def _trust(ctx: ssl.SSLContext, cfg: SslConfig, purpose: ssl.Purpose) -> None:
    cadata = load_truststore(cfg)
    if cadata is None:
        ctx.load_default_certs(purpose)
        return
    try:
        ctx.load_verify_locations(cadata=cadata)
    except ssl.SSLError as e:
        raise SslConfigError("ssl.truststore.location", f"unusable certificates: {e}") from None


def server_context(cfg: SslConfig, material: KeyMaterial | None = None) -> ssl.SSLContext:
    """The context an SSL/SASL_SSL listener accepts with."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, cfg)
    _load_chain(ctx, material or load_keystore(cfg))
    mode = _CLIENT_AUTH.get(cfg.client_auth)
    if mode is None:
        raise SslConfigError("ssl.client.auth", f"unknown value {cfg.client_auth}")
    ctx.verify_mode = mode
    if mode != ssl.CERT_NONE:
        _trust(ctx, cfg, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(cfg: SslConfig) -> ssl.SSLContext:
    """The context a client (tools, inter-broker) connects with: the server is verified
    against the truststore; our keystore is presented when configured."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, cfg)
    ctx.check_hostname = (cfg.endpoint_identification_algorithm or "").lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _trust(ctx, cfg, ssl.Purpose.SERVER_AUTH)
    if cfg.has_keystore:
        _load_chain(ctx, load_keystore(cfg))
    return ctx
