"""SASL/PLAIN (RFC 4616; Kafka's ``PlainSaslServer`` and ``PlainServerCallbackHandler``).

The client sends one message ``[authzid] NUL username NUL password`` (UTF-8). The password
is checked against the ``user_<username>="<password>"`` options of the listener's
``PlainLoginModule`` JAAS entry. Errors (messages as Kafka's, all sent to the client):
not 3 tokens, empty username or password, wrong credentials ("Invalid username or
password"), an authorization id other than the username.
"""

from __future__ import annotations

from broker.security.sasl.server import IllegalSaslStateError, SaslServer
from common.security.errors import SaslAuthenticationError

__all__ = ["PlainSaslServer", "plain_initial_response"]


class PlainSaslServer(SaslServer):
    mechanism = "PLAIN"

    def __init__(self, listener: str, credentials) -> None:
        self.listener = listener
        self.credentials = credentials

    def evaluate(self, token: bytes) -> bytes | None:
        if self.complete:
            raise IllegalSaslStateError("Authentication exchange has already completed")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if not self.credentials.plain_password_ok(self.listener, username, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        self.authorization_id = username
        self.complete = True
        return b""


def plain_initial_response(username: str, password: str) -> bytes:
    """The client's only message."""
    return f"\x00{username}\x00{password}".encode()
