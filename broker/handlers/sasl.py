"""SaslHandshake (17) and SaslAuthenticate (36) after authentication.

Behaviour: before a SASL connection is authenticated its frames never reach handlers (the
Processor hands them to the connection's ``SaslServerAuthenticator``). These handlers see
only what comes after:

* on a SASL connection whose client used SaslAuthenticate v1+, a SaslHandshake starts a
  re-authentication (KIP-368): same mechanism required (another mechanism fails the
  following SaslAuthenticate), the following SaslAuthenticate requests continue it, and the
  principal must not change. A failed re-authentication answers SASL_AUTHENTICATION_FAILED
  and closes the connection after ``connection.failed.authentication.delay.ms``.
* anywhere else (PLAINTEXT/SSL listeners, a client that cannot re-authenticate, a
  SaslAuthenticate with no exchange in progress): ILLEGAL_SASL_STATE, as Kafka's
  ``KafkaApis.handleSaslHandshakeRequest``/``handleSaslAuthenticateRequest`` answer.

Version notes: SaslHandshake v0-v1, SaslAuthenticate v0-v2 (v1 adds
``session_lifetime_ms``, v2 flexible).
"""

from __future__ import annotations

from broker.handlers.registry import error_code_response, handles
from protocol import api
from protocol.errors import ErrorCode

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SaslHandshakeResponse = api.API_KEYS[SASL_HANDSHAKE].response_cls
SaslAuthenticateResponse = api.API_KEYS[SASL_AUTHENTICATE].response_cls


def _authenticator(ctx):
    session = ctx.session
    return session.authenticator if session is not None else None


@handles(SASL_HANDSHAKE, 0, 1, error_response=error_code_response(SaslHandshakeResponse))
def handle_sasl_handshake(ctx, request):
    auth = _authenticator(ctx)
    if auth is None or not auth.complete or not auth.supports_reauth:
        return SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
                                     mechanisms=[])
    response, failure = auth.begin_reauthentication(request.mechanism)
    if failure is not None and ctx.processor is not None:
        ctx.processor.close_after_failed_reauthentication(failure)
    return response


@handles(SASL_AUTHENTICATE, 0, 2,
         error_response=error_code_response(SaslAuthenticateResponse))
def handle_sasl_authenticate(ctx, request):
    auth = _authenticator(ctx)
    if auth is None or not auth.reauthenticating:
        return SaslAuthenticateResponse(
            error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
            error_message="SaslAuthenticate request received after successful authentication")
    response, failure = auth.authenticate(request, ctx.api_version)
    if failure is not None and ctx.processor is not None:
        ctx.processor.close_after_failed_reauthentication(failure)
    elif auth.complete:
        auth.reauthenticating = False
        ctx.session.principal = auth.principal
    return response
