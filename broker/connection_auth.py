"""Authentication of one client connection (``broker.processor``): the SASL exchange before
any request reaches the RequestChannel, the SSL principal, KIP-368 session expiry.

Functions over the connection (a ``ProcessorBase``), called from its frame path.

Security (issue 15, ``broker.security``): each connection gets a ``Session`` (its
principal) from ``server.security``. On SASL listeners every frame before authentication
completes goes to the session's ``SaslServerAuthenticator`` (frames are limited to
``sasl.server.max.receive.size`` meanwhile), never to the RequestChannel; ApiVersions is
answered by the ApiVersions handler in between. A failed authentication is logged once
("Failed authentication with /<ip> (channelId=<id>) (<reason>)"), answered with the
authenticator's error response after ``connection.failed.authentication.delay.ms`` and the
connection closed. A request after the session expired (KIP-368) closes the connection
unless it is a SaslHandshake (re-authentication, handled by the SASL handlers). On SSL
listeners the principal comes from the client certificate of the finished handshake.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from broker.request_channel import Request, Response
from protocol.frames import SIZE_PREFIX
from protocol.headers import peek_request_header

__all__ = ["auth_failed", "auth_pump", "check_session"]

log = logging.getLogger("broker.processor")

SASL_HANDSHAKE = 17  # api_key of SaslHandshake: allowed on an expired session (re-authentication)


def auth_pump(conn) -> None:
    security = conn.server.security
    queue = conn._auth_queue
    while queue and not conn._auth_busy and not conn.closed:
        if not security.ready.is_set():  # credentials still loading (startup)
            conn._auth_busy = True
            asyncio.get_running_loop().create_task(_auth_after(conn, security.ready.wait()))
            return
        frame = queue.popleft()
        conn._release_request(frame.nbytes)  # consumed here, never reaches a handler
        step = conn.session.authenticator.receive(frame)
        if step.api_versions:
            api_key, version, correlation_id = peek_request_header(frame)
            result = conn.server.request_channel.handler(Request(
                conn.connection_id, -1, time.monotonic_ns(), api_key, version,
                correlation_id, frame, conn.listener, conn.client_address, None))
            if result is not None and not isinstance(result, Response):
                conn._auth_busy = True
                asyncio.get_running_loop().create_task(_auth_after(conn, result, True))
                return
            _auth_write(conn, result)
        if step.failure is not None:
            auth_failed(conn, step.failure, step.response)
            return
        if step.response is not None:
            conn.transport.write(SIZE_PREFIX.pack(len(step.response)) + step.response)
        if step.complete:
            _auth_complete(conn)
            return


async def _auth_after(conn, awaitable, is_response: bool = False) -> None:
    try:
        result = await awaitable
    except Exception:  # noqa: BLE001
        log.exception("closing %s: answering during authentication failed",
                      conn.connection_id)
        conn.close()
        return
    finally:
        conn._auth_busy = False
    if conn.closed:
        return
    if is_response:
        _auth_write(conn, result)
    auth_pump(conn)


def _auth_write(conn, response: Response | None) -> None:
    if response is None or conn.transport is None or conn.closed:
        return
    if response.close:
        conn.close()
        return
    conn.transport.write(b"".join([SIZE_PREFIX.pack(response.size), *response.parts]))


def auth_failed(conn, reason: str, response: bytes | None) -> None:
    log.info("Failed %sauthentication with /%s (channelId=%s) (%s)",
             "re-" if conn.session.authenticator.reauthenticating else "",
             _host(conn.client_address), conn.connection_id, reason)
    conn.server.failed_authentications += 1
    if conn._auth_queue is not None:
        conn._auth_queue.clear()
    if conn.transport is not None and conn._reading:
        conn._reading = False
        conn.transport.pause_reading()
    delay_ms = conn.server.security.failed_authentication_delay_ms
    asyncio.get_running_loop().call_later(delay_ms / 1000.0, _close_with, conn, response)


def _close_with(conn, payload: bytes | None) -> None:
    if payload is not None and conn.transport is not None and not conn.closed:
        conn.transport.write(SIZE_PREFIX.pack(len(payload)) + payload)
    conn.close()


def _auth_complete(conn) -> None:
    auth = conn.session.authenticator
    conn.session.principal = auth.principal
    conn.authenticated()
    queue, conn._auth_queue = conn._auth_queue, None
    log.debug("Successfully authenticated %s as %s", conn.connection_id, auth.principal)
    for frame in queue or ():
        if not conn._on_frame(frame):
            return
    conn._dispatch()
    conn._update_reading()


def check_session(conn, session, api_key: int) -> None:
    """SSL principal on the first request; KIP-368 session expiry on every request."""
    if session.security_protocol == "SSL":
        session.settled = True
        listener = conn.server.security.listener(conn.listener)
        session.principal = listener.ssl_principal(
            conn.transport.get_extra_info("ssl_object"))
        return
    auth = session.authenticator
    if auth is None:
        session.settled = True  # nothing to check on this connection
        return
    if api_key != SASL_HANDSHAKE and auth.session_expired(conn.server.security.time_ms()):
        log.info("closing %s: SASL session of %s expired (connections.max.reauth.ms / "
                 "credential lifetime) without re-authentication", conn.connection_id,
                 session.principal)
        conn.server.expired_sessions_closed += 1
        conn.close()


def _host(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
