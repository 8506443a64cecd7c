"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512, server side (RFC 5802, RFC 7677; Kafka's
``ScramSaslServer``). The client and the message grammar: ``common.security.scram_client``.

Server exchange: client-first ``n,[a=<authzid>],n=<saslname>,r=<nonce>[,ext=v...]`` ->
server-first ``r=<client nonce><server nonce>,s=<salt b64>,i=<iterations>`` -> client-final
``c=biws,r=<nonce>,p=<proof b64>`` -> server-final ``v=<server signature b64>``.
With the extension ``tokenauth=true`` the username is a delegation token id and the
credential is the token's HMAC (KIP-48); the session's principal is then the token owner.

Errors as Kafka's: an unknown user, a bad proof, a wrong nonce, too few iterations ->
:class:`SaslCredentialError` (the client gets the generic message); a message that does not
parse -> SaslCredentialError too ("Invalid SCRAM ... message format"); an authorization id
other than the username -> ``common.security.errors.SaslAuthenticationError``.
"""

from __future__ import annotations

import base64
import hmac as _hmac

from broker.security.principal import KafkaPrincipal
from broker.security.sasl.server import IllegalSaslStateError, SaslCredentialError, SaslServer
from common.security.errors import SaslAuthenticationError
from common.security.scram import MECHANISMS, random_nonce
from common.security.scram_client import CLIENT_FINAL, CLIENT_FIRST, unescape_saslname

__all__ = ["ScramSaslServer"]

def _extensions(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(",")[1:]:
        k, _, v = part.partition("=")
        out[k] = v
    return out


class ScramSaslServer(SaslServer):
    def __init__(self, mechanism: str, credentials) -> None:
        self.mechanism = mechanism
        self.mech = MECHANISMS[mechanism]
        self.credentials = credentials
        self._state = "first"
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential = None

    def evaluate(self, token: bytes) -> bytes | None:
        try:
            if self._state == "first":
                return self._first(bytes(token))
            if self._state == "final":
                return self._final(bytes(token))
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl server state {self._state}")
        except (SaslCredentialError, SaslAuthenticationError, IllegalSaslStateError):
            self._state = "failed"
            self._credential = None
            raise

    def _first(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        m = CLIENT_FIRST.fullmatch(text) if text is not None else None
        if m is None:
            raise SaslCredentialError(f"Invalid SCRAM client first message format: {text!r}")
        username = unescape_saslname(m["saslname"])
        extensions = _extensions(m["ext"])
        if extensions.get("tokenauth", "").lower() == "true":
            found = self.credentials.token_credential(self.mechanism, username)
            if found is None:
                raise SaslCredentialError(
                    f"Token Authentication failed: Invalid tokenId : {username}")
            credential, owner, expiry = found
            self.principal_override = KafkaPrincipal(owner.principal_type, owner.name, True)
            self.authorization_id = owner.name
            self.credential_expiry_ms = expiry
            self.token_authenticated = True
        else:
            credential = self.credentials.scram_credential(self.mechanism, username)
            self.authorization_id = username
        if credential is None:
            raise SaslCredentialError("Authentication failed: Invalid user credentials")
        authzid = m["authzid"]
        if authzid and unescape_saslname(authzid) != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        if credential.iterations < self.mech.min_iterations:
            raise SaslCredentialError(f"Iterations {credential.iterations} is less than the "
                                      f"minimum {self.mech.min_iterations} for {self.mechanism}")
        self._credential = credential
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + random_nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        m = CLIENT_FINAL.fullmatch(text) if text is not None else None
        if m is None:
            raise SaslCredentialError(f"Invalid SCRAM client final message format: {text!r}")
        if not m["nonce"].endswith(self._nonce):  # Kafka's check (old librdkafka repeats
            # the client nonce in front)
            raise SaslCredentialError("Invalid client nonce in the final client message.")
        auth_message = (f"{self._client_first_bare},{self._server_first},"
                        f"{m['without_proof']}").encode()
        cred = self._credential
        mech = self.mech
        proof = base64.b64decode(m["proof"])
        signature = mech.hmac(cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslCredentialError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not _hmac.compare_digest(mech.h(client_key), cred.stored_key):
            raise SaslCredentialError("Invalid client credentials")
        server_signature = mech.hmac(cred.server_key, auth_message)
        self._credential = None
        self._state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)
