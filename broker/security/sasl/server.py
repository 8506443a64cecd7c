"""What every server-side SASL mechanism is (see ``broker.security.sasl``): the ``SaslServer``
base, two of the three failures it raises (the third, ``SaslAuthenticationError``, lives in
``common.security.errors``: clients raise it too) and the ``CredentialSource`` it reads."""

from __future__ import annotations

from typing import Protocol

__all__ = ["CredentialSource", "IllegalSaslStateError", "SaslCredentialError", "SaslServer",
           "SUPPORTED_MECHANISMS"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslCredentialError(Exception):
    """Authentication failed; the client gets a generic message (this one is only logged)."""


class IllegalSaslStateError(Exception):
    """A SASL message at a point of the exchange where none is expected."""


class CredentialSource(Protocol):
    def plain_password_ok(self, listener: str, username: str, password: str) -> bool: ...

    def scram_credential(self, mechanism: str, username: str): ...  # ScramCredential | None

    def token_credential(self, mechanism: str, token_id: str):
        """(ScramCredential, owner KafkaPrincipal, expiry ms) or None."""

    def oauth_options(self, listener: str) -> dict[str, str]: ...


class SaslServer:
    mechanism = ""
    complete = False
    authorization_id: str | None = None
    credential_expiry_ms: int | None = None
    token_authenticated = False
    #: principal to use instead of User:<authorization_id> (token owners)
    principal_override = None

    def evaluate(self, token: bytes) -> bytes | None:
        raise NotImplementedError
