"""The client side of SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; Kafka's
``ScramSaslClient``) and the SCRAM message grammar both sides parse (Kafka's ``ScramMessages``).

Exchange: client-first ``n,[a=<authzid>],n=<saslname>,r=<nonce>[,ext=v...]`` -> server-first
``r=<client nonce><server nonce>,s=<salt b64>,i=<iterations>`` -> client-final
``c=biws,r=<nonce>,p=<proof b64>`` -> server-final ``v=<server signature b64>`` (or
``e=<error>``). Usernames are escaped ``,`` -> ``=2C``, ``=`` -> ``=3D``.

Errors: a server message that does not parse, a nonce that does not extend ours, fewer
iterations than the mechanism's minimum, a server ``e=`` error or a wrong server signature ->
:class:`common.security.errors.SaslAuthenticationError`.
"""

from __future__ import annotations

import base64
import hmac as _hmac
import re

from common.security.errors import SaslAuthenticationError
from common.security.scram import MECHANISMS, random_nonce, salted_password

__all__ = ["CLIENT_FINAL", "CLIENT_FIRST", "SERVER_FINAL", "SERVER_FIRST", "ScramClient",
           "escape_saslname", "unescape_saslname"]

_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # \x01-\x7F except ',' and '='
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"  # except ','
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_B64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXT = rf"(?:,[A-Za-z]+={_VALUE})*"
CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<ext>{_EXT}))")
CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE}){_EXT}),p=(?P<proof>{_B64})")
SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_B64}),i=(?P<iterations>[0-9]+){_EXT}")
SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[^,=]+))|(?:v=(?P<signature>{_B64}){_EXT})")


def unescape_saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def escape_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")



class ScramClient:
    """Client side, for Josef's own clients (tools, inter-broker): ``first()`` ->
    ``final(server_first)`` -> ``verify(server_final)``. ``salted_password`` runs PBKDF2
    (blocking). ``token_auth`` adds the ``tokenauth=true`` extension (delegation tokens)."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 token_auth: bool = False) -> None:
        self.mech = MECHANISMS[mechanism]
        self.username = username
        self.password = password
        self.nonce = random_nonce()
        ext = ",tokenauth=true" if token_auth else ""
        self.client_first_bare = f"n={escape_saslname(username)},r={self.nonce}{ext}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return ("n,," + self.client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = bytes(server_first).decode("utf-8", "replace")
        m = SERVER_FIRST.fullmatch(text)
        if m is None or not m["nonce"].startswith(self.nonce):
            raise SaslAuthenticationError(f"Invalid SCRAM server first message: {text!r}")
        salt = base64.b64decode(m["salt"])
        iterations = int(m["iterations"])
        if iterations < self.mech.min_iterations:
            raise SaslAuthenticationError(f"Requested iterations {iterations} is less than the "
                                          f"minimum {self.mech.min_iterations}")
        self._salted = salted_password(self.mech, self.password, salt, iterations)
        without_proof = f"c=biws,r={m['nonce']}"
        self._auth_message = f"{self.client_first_bare},{text},{without_proof}".encode()
        client_key = self.mech.hmac(self._salted, b"Client Key")
        signature = self.mech.hmac(self.mech.h(client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = bytes(server_final).decode("utf-8", "replace")
        m = SERVER_FINAL.fullmatch(text)
        if m is None:
            raise SaslAuthenticationError(f"Invalid SCRAM server final message: {text!r}")
        if m["error"]:
            raise SaslAuthenticationError(f"Sasl authentication using {self.mech.name} failed "
                                          f"with error: {m['error']}")
        server_key = self.mech.hmac(self._salted, b"Server Key")
        expected = self.mech.hmac(server_key, self._auth_message)
        if not _hmac.compare_digest(base64.b64decode(m["signature"]), expected):
            raise SaslAuthenticationError("Invalid server signature in server final message")
