"""The client side of SASL/OAUTHBEARER (RFC 7628, KIP-255): the initial response and Kafka's
unsecured JWS tokens (``OAuthBearerUnsecuredLoginCallbackHandler``: for tests and development,
no signature).

Client initial response: ``n,,\\x01auth=Bearer <token>\\x01[key=value\\x01...]\\x01``.
An unsecured token is ``base64url({"alg":"none"}).base64url(claims).`` with claims ``sub``
(the principal), ``iat`` and ``exp`` (seconds since the epoch), ``scope`` (a list) if given,
plus any extra claims.
"""

from __future__ import annotations

import base64
import json
import time

__all__ = ["SEP", "client_initial_response", "unsecured_token"]

SEP = "\x01"


def unsecured_token(principal: str, lifetime_s: float = 3600, scope=(), now_s=None,
                    **claims) -> str:
    """An unsecured JWS as Kafka's ``OAuthBearerUnsecuredLoginCallbackHandler`` makes."""
    now = int(time.time()) if now_s is None else now_s
    body = {"sub": principal, "iat": now, "exp": now + lifetime_s, **claims}
    if scope:
        body["scope"] = list(scope)

    def enc(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return f"{enc({'alg': 'none'})}.{enc(body)}."


def client_initial_response(token: str, extensions: dict[str, str] | None = None) -> bytes:
    ext = "".join(f"{k}={v}{SEP}" for k, v in (extensions or {}).items())
    return f"n,,{SEP}auth=Bearer {token}{SEP}{ext}{SEP}".encode()
