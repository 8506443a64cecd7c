"""SASL/OAUTHBEARER (RFC 7628, KIP-255) with Kafka's unsecured JWS validator
(``OAuthBearerUnsecuredValidatorCallbackHandler``: for tests and development, no signature).

Client initial response: ``n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[key=value\\x01...]\\x01``.
The token is an unsecured JWS ``base64url(header).base64url(claims).`` with header
``{"alg":"none"}``; validation (options from the listener's OAuthBearerLoginModule JAAS
entry): the principal claim (``unsecuredValidatorPrincipalClaimName``, default ``sub``) is a
non-empty string, ``exp`` is present and after now minus
``unsecuredValidatorAllowableClockSkewMs``, ``iat`` (if present) not after now plus the skew
and before ``exp``, and every scope of ``unsecuredValidatorRequiredScope`` (space separated)
is in the scope claim (``unsecuredValidatorScopeClaimName``, default ``scope``).

On a bad token the server answers, as Kafka does, with a JSON error challenge
(``{"status":"invalid_token"}`` or ``{"status":"insufficient_scope", "scope":"..."}``); the
client replies ``\\x01`` and the exchange fails with SASL_AUTHENTICATION_FAILED carrying that
JSON. The token's ``exp`` becomes the credential expiry that bounds the KIP-368 session.
"""

from __future__ import annotations

import base64
import json
import re
import time

from broker.security.sasl.server import IllegalSaslStateError, SaslServer
from common.security.errors import SaslAuthenticationError
from common.security.oauthbearer_client import SEP

__all__ = ["OAuthBearerSaslServer", "TokenError", "UnsecuredJws", "validate_unsecured"]

_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_KV = r"[A-Za-z]+=[\x21-\x7E \t\r\n]+" + SEP
INITIAL = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{SEP}(?P<kvpairs>(?:{_KV})*){SEP}")
AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


class TokenError(Exception):
    """The token failed validation; ``scope`` is set for a missing required scope."""

    def __init__(self, message: str, scope: str | None = None) -> None:
        super().__init__(message)
        self.scope = scope


def _b64decode(text: str) -> bytes:
    text = text.replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


class UnsecuredJws:
    """A parsed unsecured JWS; TokenError when malformed."""

    def __init__(self, compact: str, principal_claim: str = "sub",
                 scope_claim: str = "scope") -> None:
        if ".." in compact:
            raise TokenError("Malformed compact serialization contains '..'")
        splits = compact.split(".")
        if len(splits) != 3:
            raise TokenError("Unsecured JWS compact serializations must have 3 dot-separated "
                             "Base64URL-encoded values")
        self.header = self._map(splits[0])
        self.claims = self._map(splits[1])
        if self.header.get("alg") != "none":
            raise TokenError("Unsecured JWS must have 'none' for an algorithm")
        if splits[2]:
            raise TokenError("Unsecured JWS must not contain a digital signature")
        exp = self.claims.get("exp")
        if exp is None:
            raise TokenError("No expiration time in JWT")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenError("The exp claim had the incorrect type: " + type(exp).__name__)
        self.lifetime_ms = round(exp * 1000)
        name = self.claims.get(principal_claim)
        if not isinstance(name, str) or not name.strip():
            raise TokenError(f"No principal name in JWT claim: {principal_claim}")
        self.principal_name = name
        scope = self.claims.get(scope_claim)
        if isinstance(scope, str):
            self.scope = set(scope.split())
        elif isinstance(scope, list):
            self.scope = {str(s) for s in scope}
        else:
            self.scope = set()

    @staticmethod
    def _map(split: str) -> dict:
        try:
            value = json.loads(_b64decode(split))
        except ValueError:
            raise TokenError("malformed Base64 URL encoded value or JSON") from None
        if not isinstance(value, dict):
            raise TokenError("malformed JSON")
        return value


def validate_unsecured(token: str, options: dict[str, str], now_ms: int) -> UnsecuredJws:
    """Kafka's unsecured validator checks (see the module docstring); TokenError on failure."""
    principal_claim = (options.get("unsecuredValidatorPrincipalClaimName") or "").strip() or "sub"
    scope_claim = (options.get("unsecuredValidatorScopeClaimName") or "").strip() or "scope"
    required = (options.get("unsecuredValidatorRequiredScope") or "").split()
    try:
        skew = int((options.get("unsecuredValidatorAllowableClockSkewMs") or "0").strip() or 0)
    except ValueError:
        skew = 0
    jws = UnsecuredJws(token, principal_claim, scope_claim)
    iat = jws.claims.get("iat")
    if iat is not None:
        if not isinstance(iat, int | float):
            raise TokenError("The iat claim had the incorrect type")
        if 1000 * iat > now_ms + skew:
            raise TokenError(f"The Issued At value ({iat} seconds) was after the indicated time "
                             f"({now_ms} ms) plus allowable clock skew ({skew} ms)")
        if jws.claims["exp"] <= iat:
            raise TokenError("The Expiration Time time was not after the Issued At time")
    if now_ms - skew >= jws.lifetime_ms:
        raise TokenError(f"The indicated time ({now_ms} ms) minus allowable clock skew "
                         f"({skew} ms) was on or after the Expiration Time value "
                         f"({jws.claims['exp']} seconds)")
    missing = [s for s in required if s not in jws.scope]
    if missing:
        raise TokenError(f"The provided scope ({sorted(jws.scope)}) was missing a required "
                         f"scope ({missing[0]})", scope=" ".join(required))
    return jws


class OAuthBearerSaslServer(SaslServer):
    mechanism = "OAUTHBEARER"

    def __init__(self, options: dict[str, str], time_ms=None) -> None:
        self.options = options
        self.time_ms = time_ms or (lambda: int(time.time() * 1000))
        self._error: str | None = None
        self.extensions: dict[str, str] = {}

    def evaluate(self, token: bytes) -> bytes | None:
        token = bytes(token)
        if token == SEP.encode() and self._error is not None:
            raise SaslAuthenticationError(self._error)
        if self.complete:
            raise IllegalSaslStateError("Authentication exchange has already completed")
        self._error = None
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        m = INITIAL.fullmatch(text) if text is not None else None
        if m is None:
            raise SaslAuthenticationError(f"Invalid OAUTHBEARER client first message: {text!r}")
        pairs = {}
        for kv in m["kvpairs"].split(SEP):
            if kv:
                k, _, v = kv.partition("=")
                pairs[k] = v
        auth = AUTH.fullmatch(pairs.pop("auth", ""))
        if auth is None:
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message: no auth")
        if auth["scheme"].lower() != "bearer":
            raise SaslAuthenticationError(
                f"Invalid scheme in OAUTHBEARER client first message: {auth['scheme']}")
        try:
            jws = validate_unsecured(auth["token"], self.options, int(self.time_ms()))
        except TokenError as e:
            status = "insufficient_scope" if e.scope else "invalid_token"
            error = f'{{"status":"{status}"'
            if e.scope:
                error += f', "scope":"{e.scope}"'
            self._error = error + "}"
            return self._error.encode()
        authzid = m["authzid"] or ""
        if authzid and authzid != jws.principal_name:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that "
                f"is different from the token's principal name ({jws.principal_name})")
        self.extensions = pairs
        self.authorization_id = jws.principal_name
        self.credential_expiry_ms = jws.lifetime_ms
        self.complete = True
        return b""
