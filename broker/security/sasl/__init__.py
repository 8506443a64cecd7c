"""SASL mechanisms, one module each (server and client side): ``plain`` (RFC 4616),
``scram`` (RFC 5802/7677, delegation tokens with ``tokenauth=true``), ``oauthbearer``
(RFC 7628 with Kafka's unsecured JWS validator).

A server mechanism is a ``SaslServer``: ``evaluate(token) -> bytes | None`` (the challenge to
send back; None = nothing), ``complete``, ``authorization_id`` (the authenticated name),
``credential_expiry_ms`` (absolute ms when the credential expires, or None: KIP-368 caps the
session lifetime with it), ``token_authenticated``. It raises:

* :class:`SaslAuthenticationError`: the message is sent to the client (Kafka's
  ``SaslAuthenticationException``);
* :class:`SaslCredentialError`: the client only gets "Authentication failed during
  authentication due to invalid credentials with SASL mechanism <M>" (Kafka's plain
  ``SaslException``: its message may reveal whether a user exists);
* :class:`IllegalSaslStateError`: a token after completion.

Credentials come from a :class:`CredentialSource` (JAAS ``user_<name>`` entries for PLAIN,
the SCRAM credential cache, the delegation token cache), so mechanisms do no I/O.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["CredentialSource", "IllegalSaslStateError", "SaslAuthenticationError",
           "SaslCredentialError", "SaslServer", "SUPPORTED_MECHANISMS", "create_server"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslAuthenticationError(Exception):
    """Authentication failed; the message goes to the client."""


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


def create_server(mechanism: str, listener: str, credentials: CredentialSource,
                  time_ms) -> SaslServer:
    """A new server for ``mechanism`` (one of SUPPORTED_MECHANISMS)."""
    if mechanism == "PLAIN":
        from broker.security.sasl.plain import PlainSaslServer
        return PlainSaslServer(listener, credentials)
    if mechanism.startswith("SCRAM-"):
        from broker.security.sasl.scram import ScramSaslServer
        return ScramSaslServer(mechanism, credentials)
    if mechanism == "OAUTHBEARER":
        from broker.security.sasl.oauthbearer import OAuthBearerSaslServer
        return OAuthBearerSaslServer(credentials.oauth_options(listener), time_ms)
    raise ValueError(f"unsupported SASL mechanism {mechanism}")
