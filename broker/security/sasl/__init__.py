"""SASL mechanisms, server side, one module each: ``plain`` (RFC 4616), ``scram`` (RFC
5802/7677, delegation tokens with ``tokenauth=true``), ``oauthbearer`` (RFC 7628 with Kafka's
unsecured JWS validator). The client sides are in ``common.security`` (``scram_client``,
``oauthbearer_client``) so tools need no broker module.

A server mechanism is a ``SaslServer``: ``evaluate(token) -> bytes | None`` (the challenge to
send back; None = nothing), ``complete``, ``authorization_id`` (the authenticated name),
``credential_expiry_ms`` (absolute ms when the credential expires, or None: KIP-368 caps the
session lifetime with it), ``token_authenticated``. It raises:

* ``common.security.errors.SaslAuthenticationError``: the message is sent to the client
  (Kafka's ``SaslAuthenticationException``);
* :class:`SaslCredentialError`: the client only gets "Authentication failed during
  authentication due to invalid credentials with SASL mechanism <M>" (Kafka's plain
  ``SaslException``: its message may reveal whether a user exists);
* :class:`IllegalSaslStateError`: a token after completion.

Credentials come from a :class:`CredentialSource` (JAAS ``user_<name>`` entries for PLAIN,
the SCRAM credential cache, the delegation token cache), so mechanisms do no I/O.
"""

from __future__ import annotations

from broker.security.sasl.oauthbearer import OAuthBearerSaslServer
from broker.security.sasl.plain import PlainSaslServer
from broker.security.sasl.scram import ScramSaslServer
from broker.security.sasl.server import (
    SUPPORTED_MECHANISMS,
    CredentialSource,
    IllegalSaslStateError,
    SaslCredentialError,
    SaslServer,
)

__all__ = ["CredentialSource", "IllegalSaslStateError", "SaslCredentialError", "SaslServer",
           "SUPPORTED_MECHANISMS", "create_server"]


def create_server(mechanism: str, listener: str, credentials: CredentialSource,
                  time_ms) -> SaslServer:
    """A new server for ``mechanism`` (one of SUPPORTED_MECHANISMS)."""
    if mechanism == "PLAIN":
        return PlainSaslServer(listener, credentials)
    if mechanism.startswith("SCRAM-"):
        return ScramSaslServer(mechanism, credentials)
    if mechanism == "OAUTHBEARER":
        return OAuthBearerSaslServer(credentials.oauth_options(listener), time_ms)
    raise ValueError(f"unsupported SASL mechanism {mechanism}")
