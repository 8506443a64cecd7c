"""Test certificates made with ``cryptography``: a CA, a server certificate for
127.0.0.1/localhost and client certificates, written as PEM and PKCS12 files.

    certs = make_certs(tmp_path)        # -> Certs with paths and passwords
    certs.server_p12, certs.server_pem (key + chain), certs.ca_pem, certs.client_p12(...)

EC P-256 keys (fast to make; every client under test supports them). PKCS12 files use the
password ``certs.password``; ``server_pem`` holds a key encrypted with ``certs.key_password``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

PASSWORD = "store-secret"
KEY_PASSWORD = "key-secret"


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
             x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Josef Tests")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _cert(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False,
          san: list | None = None, days: int = 30) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                          False), critical=True)
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


@dataclass
class Certs:
    dir: Path
    ca_cert: x509.Certificate
    ca_key: object
    password: str = PASSWORD
    key_password: str = KEY_PASSWORD
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def ca_pem(self) -> Path:
        return self.files["ca.pem"]

    @property
    def server_p12(self) -> Path:
        return self.files["server.p12"]

    @property
    def server_pem(self) -> Path:
        return self.files["server.pem"]

    def leaf(self, name: str, cn: str, ou: str | None = None, *, server: bool = False,
             self_signed: bool = False) -> dict[str, Path]:
        """Make ``<name>.p12`` (password), ``<name>.pem`` (encrypted key + chain),
        ``<name>-key.pem`` (unencrypted key) and ``<name>-cert.pem``; returns their paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))] \
            if server else None
        subject = _name(cn, ou)
        if self_signed:
            cert = _cert(subject, key, subject, key, san=san)
        else:
            cert = _cert(subject, key, self.ca_cert.subject, self.ca_key, san=san)
        chain = [cert] if self_signed else [cert, self.ca_cert]
        out = {}
        p12 = pkcs12.serialize_key_and_certificates(
            name.encode(), key, cert, None if self_signed else [self.ca_cert],
            serialization.BestAvailableEncryption(self.password.encode()))
        out["p12"] = self._write(f"{name}.p12", p12)
        enc = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(
                                    self.key_password.encode()))
        plain = key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
        chain_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
        out["pem"] = self._write(f"{name}.pem", enc + chain_pem)
        out["key"] = self._write(f"{name}-key.pem", plain)
        out["cert"] = self._write(f"{name}-cert.pem", chain_pem)
        return out

    def _write(self, fname: str, data: bytes) -> Path:
        path = self.dir / fname
        path.write_bytes(data)
        self.files[fname] = path
        return path


def make_certs(directory: Path) -> Certs:
    """A CA plus ``server`` (CN=localhost, SAN localhost/127.0.0.1) and ``client``
    (CN=client,OU=Clients) leaves under ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Josef Test CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    certs = Certs(directory, ca, ca_key)
    certs._write("ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    p12 = pkcs12.serialize_key_and_certificates(
        b"ca", None, None, [ca], serialization.BestAvailableEncryption(PASSWORD.encode()))
    certs._write("truststore.p12", p12)
    certs.leaf("server", "localhost", "Brokers", server=True)
    certs.leaf("client", "client", "Clients")
    return certs
