"""Optional login for the console (``--basic-auth-file FILE``): HTTP Basic authentication
(RFC 7617) against a file of ``user:hash`` lines, so the console can face a network (put
TLS in front of it: Basic credentials travel in clear otherwise).

File format: one ``user:hash`` per line; blank lines and ``#`` comments are skipped. ``hash``
is ``pbkdf2_sha256$<iterations>$<salt>$<base64 digest>`` (PBKDF2-HMAC-SHA256, RFC 8018),
which ``josef console --hash-password`` prints, or ``plain$<password>`` for a throwaway
setup. A malformed line stops the console naming the line. Passwords are compared in
constant time; a verified (user, password) is remembered for ``CACHE_S`` so that the
static assets of a page do not each cost a PBKDF2 run.

Without the file nobody logs in and the user shown in the audit log is the client address.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time

from aiohttp import web

__all__ = ["BasicAuth", "hash_password", "load_users", "AuthFileError", "USER"]

ITERATIONS = 600_000
CACHE_S = 300.0
USER = web.RequestKey("console_user", str)


class AuthFileError(ValueError):
    """The basic-auth file cannot be read or has a malformed line."""


def hash_password(password: str, iterations: int = ITERATIONS, salt: str | None = None) -> str:
    salt = salt or base64.b64encode(os.urandom(12)).decode()
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"pbkdf2_sha256${iterations}${salt}${base64.b64encode(digest).decode()}"


def _check(password: str, stored: str) -> bool:
    scheme, _, rest = stored.partition("$")
    if scheme == "plain":
        return hmac.compare_digest(password.encode(), rest.encode())
    iterations, salt, _digest = rest.split("$", 2)
    return hmac.compare_digest(hash_password(password, int(iterations), salt), stored)


def load_users(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise AuthFileError(f"cannot read {path}: {e.strerror or e}") from None
    users = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        scheme = stored.split("$", 1)[0]
        ok = sep and user and (
            (scheme == "plain" and "$" in stored) or
            (scheme == "pbkdf2_sha256" and len(stored.split("$")) == 4
             and stored.split("$")[1].isdigit()))
        if not ok:
            raise AuthFileError(f"{path} line {n}: expected user:pbkdf2_sha256$iterations$salt"
                                f"$digest or user:plain$password")
        users[user] = stored
    if not users:
        raise AuthFileError(f"{path} has no user")
    return users


class BasicAuth:
    """aiohttp middleware factory: 401 with ``WWW-Authenticate`` until valid credentials."""

    def __init__(self, users: dict[str, str], realm: str = "Josef console",
                 clock=time.monotonic) -> None:
        self.users = users
        self.realm = realm
        self.clock = clock
        self._verified: dict[bytes, tuple[str, float]] = {}

    def user(self, header: str | None) -> str | None:
        if not header or not header.startswith("Basic "):
            return None
        key = hashlib.sha256(header.encode()).digest()
        hit = self._verified.get(key)
        if hit is not None and self.clock() - hit[1] < CACHE_S:
            return hit[0]
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(
                ":")
        except (ValueError, UnicodeDecodeError):
            return None
        stored = self.users.get(user)
        if stored is None or not _check(password, stored):
            return None
        if len(self._verified) > 1000:
            self._verified.clear()
        self._verified[key] = (user, self.clock())
        return user

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        user = self.user(request.headers.get("Authorization"))
        if user is None:
            raise web.HTTPUnauthorized(
                text="Log in to the Josef console.",
                headers={"WWW-Authenticate": f'Basic realm="{self.realm}", charset="UTF-8"'})
        request[USER] = user
        return await handler(request)
