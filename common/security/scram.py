"""SCRAM-SHA-256 / SCRAM-SHA-512 credentials (RFC 5802, RFC 7677; Kafka's ``ScramFormatter``
and ``ScramCredentialUtils``).

A stored credential is ``salt``, ``stored_key = H(HMAC(salted_password, "Client Key"))``,
``server_key = HMAC(salted_password, "Server Key")`` and ``iterations``, where
``salted_password = PBKDF2-HMAC-H(password, salt, iterations)``. Kafka keeps it in the user's
config document (``/config/users/<user>``) as the string
``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>`` under the mechanism
name. Iterations are 4096..16384 for both mechanisms (``ScramMechanism.minIterations`` /
KIP-554's upper bound).

PBKDF2 with thousands of iterations costs milliseconds of CPU: callers on the event loop run
:func:`salted_password` in an executor.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

__all__ = ["MECHANISMS", "ScramCredential", "ScramMechanism", "credential_from_salted",
           "credential_from_password", "salted_password", "mechanism", "random_nonce"]


@dataclass(frozen=True)
class ScramMechanism:
    name: str  # "SCRAM-SHA-256"
    hash_name: str  # hashlib name
    type_id: int  # KIP-554 mechanism id: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512
    min_iterations: int = 4096
    max_iterations: int = 16384

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE = {m.type_id: m for m in MECHANISMS.values()}


def mechanism(name: str) -> ScramMechanism | None:
    return MECHANISMS.get(name)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        b = base64.b64encode
        return (f"salt={b(self.salt).decode()},stored_key={b(self.stored_key).decode()},"
                f"server_key={b(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        """Parse :meth:`to_config`'s form; ValueError if a field is missing or malformed."""
        fields = {}
        for part in text.split(","):
            k, sep, v = part.partition("=")
            if not sep:
                raise ValueError(f"malformed SCRAM credential field {part!r}")
            fields[k.strip()] = v.strip()
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"malformed SCRAM credential: {e}") from None


def salted_password(mech: ScramMechanism, password: bytes | str, salt: bytes,
                    iterations: int) -> bytes:
    """``Hi(password, salt, i)`` = PBKDF2 with HMAC-H (CPU heavy: use an executor)."""
    if isinstance(password, str):
        password = password.encode("utf-8")
    return hashlib.pbkdf2_hmac(mech.hash_name, password, salt, iterations)


def credential_from_salted(mech: ScramMechanism, salted: bytes, salt: bytes,
                           iterations: int) -> ScramCredential:
    client_key = mech.hmac(salted, b"Client Key")
    return ScramCredential(salt, mech.h(client_key), mech.hmac(salted, b"Server Key"),
                           iterations)


def credential_from_password(mech: ScramMechanism, password: str, iterations: int = 4096,
                             salt: bytes | None = None) -> ScramCredential:
    """A new credential (random salt unless given). Blocking (PBKDF2)."""
    salt = salt if salt is not None else random_nonce().encode()
    return credential_from_salted(mech, salted_password(mech, password, salt, iterations),
                                  salt, iterations)


def random_nonce() -> str:
    """A printable random nonce (Kafka uses a 130-bit number in base 36)."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(reversed(out)) or "0"
