"""The SASL server authenticator of one connection: Kafka's ``SaslServerAuthenticator``
state machine, without I/O (the Processor feeds it frames and sends what it returns).

States (Kafka's names)::

    HANDSHAKE_OR_VERSIONS_REQUEST --ApiVersions--> HANDSHAKE_REQUEST --SaslHandshake-->
    AUTHENTICATE --tokens...--> COMPLETE            (any failure -> FAILED)
    COMPLETE --SaslHandshake (KIP-368)--> REAUTH_PROCESS_HANDSHAKE --> AUTHENTICATE --> COMPLETE
                                                       (other mechanism: REAUTH_BAD_MECHANISM)

* Before authentication only ApiVersions (answered by the broker's ApiVersions handler:
  ``AuthStep.api_versions``) and SaslHandshake v0/v1 are accepted. Anything else -
  another API, a frame that is not a request, bytes of a GSSAPI client (not supported) -
  fails the connection without a response, as Kafka does.
* SaslHandshake: an enabled mechanism -> NONE with the enabled list; otherwise
  UNSUPPORTED_SASL_MECHANISM with the list, then the connection closes.
* After a v0 handshake the client sends raw tokens (size-prefixed, no request header) and
  gets raw challenges back; after v1, each token is a SaslAuthenticate request (v0-v2).
  A non-SaslAuthenticate request there is answered with its own error response carrying
  ILLEGAL_SASL_STATE, then closed.
* Failures answer SaslAuthenticate with SASL_AUTHENTICATION_FAILED and the mechanism's
  message (or Kafka's generic "invalid credentials" text for credential errors), then the
  Processor closes the connection after ``connection.failed.authentication.delay.ms``.
* Completion: ``session_lifetime_ms`` (KIP-368) = min(``connections.max.reauth.ms`` of the
  mechanism, credential expiry - now) when either is set, else 0; ``session_expiry_ms`` is
  then now + lifetime and the broker closes the connection at its first request after that
  unless the client re-authenticated (only clients that used SaslAuthenticate v1+ may).
  Re-authentication must keep the mechanism and the principal.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.security.principal import KafkaPrincipal
from broker.security.sasl import (
    IllegalSaslStateError,
    SaslCredentialError,
    SaslServer,
    create_server,
)
from common.security.errors import SaslAuthenticationError
from protocol import api
from protocol.errors import ErrorCode, KafkaError
from protocol.headers import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
    response_header_version,
)

__all__ = ["AuthStep", "SaslServerAuthenticator", "SaslState"]

log = logging.getLogger("broker.security.authenticator")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
MAX_API_VERSIONS_VERSION = 4
SaslHandshakeRequest = api.API_KEYS[SASL_HANDSHAKE].request_cls
SaslHandshakeResponse = api.API_KEYS[SASL_HANDSHAKE].response_cls
SaslAuthenticateRequest = api.API_KEYS[SASL_AUTHENTICATE].request_cls
SaslAuthenticateResponse = api.API_KEYS[SASL_AUTHENTICATE].response_cls


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = 1
    HANDSHAKE_REQUEST = 2
    AUTHENTICATE = 3
    COMPLETE = 4
    FAILED = 5
    REAUTH_PROCESS_HANDSHAKE = 6
    REAUTH_BAD_MECHANISM = 7


@dataclass(frozen=True, slots=True)
class AuthStep:
    """What the Processor does with one frame: send ``response`` (a frame payload without
    the size prefix), or answer the frame with the ApiVersions handler (``api_versions``);
    on ``failure`` log it and close after the response; ``complete`` = authenticated."""

    response: bytes | None = None
    api_versions: bool = False
    failure: str | None = None
    complete: bool = False


class SaslServerAuthenticator:
    """One connection's authenticator. ``mechanisms``: the listener's enabled mechanisms;
    ``credentials``: a ``broker.security.sasl.CredentialSource``; ``reauth_ms(mechanism)``:
    ``connections.max.reauth.ms`` for it (0 = none); ``time_ms``: wall clock in ms."""

    def __init__(self, listener: str, mechanisms: list[str], credentials, *,
                 reauth_ms: Callable[[str], int] = lambda m: 0,
                 principal_builder: Callable[[SaslServer], KafkaPrincipal] | None = None,
                 time_ms: Callable[[], float] = lambda: time.time() * 1000) -> None:
        self.listener = listener
        self.mechanisms = list(mechanisms)
        self.credentials = credentials
        self.reauth_ms = reauth_ms
        self.principal_builder = principal_builder or _default_principal
        self.time_ms = time_ms
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.server: SaslServer | None = None
        self.headers = False  # SaslHandshake v1+: tokens come in SaslAuthenticate requests
        self.supports_reauth = False  # the client used SaslAuthenticate v1+
        self.session_expiry_ms: int | None = None
        self.reauthenticating = False
        self._bad_mechanism_message = ""
        self._previous: tuple[str, KafkaPrincipal] | None = None

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    # ---- initial authentication ---------------------------------------------------------------
    def receive(self, frame: memoryview | bytes) -> AuthStep:
        """The next frame of the initial authentication (state < COMPLETE)."""
        state = self.state
        try:
            if state in (SaslState.HANDSHAKE_OR_VERSIONS_REQUEST, SaslState.HANDSHAKE_REQUEST):
                return self._kafka_request(frame)
            if state is SaslState.AUTHENTICATE:
                return self._token(frame)
            return self._fail("Unexpected frame in SASL state " + state.name)
        except Exception as e:  # noqa: BLE001 - client input must never escape
            return self._fail(f"unreadable SASL frame: {e}")

    def _fail(self, message: str, response: bytes | None = None) -> AuthStep:
        self.state = SaslState.FAILED
        return AuthStep(response=response, failure=message)

    def _kafka_request(self, frame) -> AuthStep:
        if len(frame) < 8:
            return self._not_a_request(frame)
        api_key, version, _ = peek_request_header(frame)
        if api_key not in (API_VERSIONS, SASL_HANDSHAKE):
            if api_key not in api.API_KEYS:
                return self._not_a_request(frame)
            name = api.API_KEYS[api_key].name
            return self._fail(f"Unexpected Kafka request of type {name} during SASL handshake.")
        if api_key == API_VERSIONS:
            if self.state is not SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
                return self._fail("Unexpected ApiVersions request received during SASL "
                                  f"authentication state {self.state.name}")
            if version <= MAX_API_VERSIONS_VERSION and self._valid_api_versions(frame, version):
                self.state = SaslState.HANDSHAKE_REQUEST
            return AuthStep(api_versions=True)
        header, offset = decode_request_header(memoryview(frame))
        if version > 1:
            return self._fail(f"Version {version} is not supported for apiKey SASL_HANDSHAKE")
        request = SaslHandshakeRequest.decode(memoryview(frame), version, offset)
        mechanism = request.mechanism
        self.headers = version >= 1
        enabled = list(self.mechanisms)
        if mechanism not in enabled:
            response = SaslHandshakeResponse(
                error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=enabled)
            return self._fail(f"Unsupported SASL mechanism {mechanism}",
                              _encode(SASL_HANDSHAKE, version, header.correlation_id, response))
        self._start(mechanism)
        response = SaslHandshakeResponse(error_code=0, mechanisms=enabled)
        return AuthStep(_encode(SASL_HANDSHAKE, version, header.correlation_id, response))

    def _not_a_request(self, frame) -> AuthStep:
        if self.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
            # Kafka treats this as a GSSAPI token of a 0.9 client; GSSAPI is not supported
            return self._fail("Exception handling first SASL packet from client, GSSAPI is "
                              "not supported by server")
        return self._fail("Invalid request header during SASL handshake")

    @staticmethod
    def _valid_api_versions(frame, version: int) -> bool:
        if version < 3:
            return True
        from broker.handlers.api_versions import is_valid_client_software

        try:
            _, offset = decode_request_header(memoryview(frame))
            request = api.API_KEYS[API_VERSIONS].request_cls.decode(memoryview(frame), version,
                                                                   offset)
        except KafkaError:
            return False
        return is_valid_client_software(request.client_software_name,
                                        request.client_software_version)

    def _start(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.server = create_server(mechanism, self.listener, self.credentials, self.time_ms)
        self.state = SaslState.AUTHENTICATE

    def _token(self, frame) -> AuthStep:
        if not self.headers:  # SaslHandshake v0: raw tokens
            try:
                challenge = self._evaluate(bytes(frame))
            except (SaslAuthenticationError, SaslCredentialError, IllegalSaslStateError) as e:
                return self._fail(str(e))
            return AuthStep(challenge, complete=self.complete)  # b"" is sent as an empty frame
        if len(frame) < 8:
            return self._fail("Invalid request header during SASL authentication")
        api_key, version, correlation_id = peek_request_header(frame)
        if api_key != SASL_AUTHENTICATE:
            name = api.API_KEYS[api_key].name if api_key in api.API_KEYS else str(api_key)
            message = f"Unexpected Kafka request of type {name} during SASL authentication."
            return self._fail(message, _error_response(frame, ErrorCode.ILLEGAL_SASL_STATE,
                                                       message))
        if version > 2:
            return self._fail(f"Version {version} is not supported for apiKey SASL_AUTHENTICATE")
        _, offset = decode_request_header(memoryview(frame))
        request = SaslAuthenticateRequest.decode(memoryview(frame), version, offset)
        response, failure = self.authenticate(request, version)
        return AuthStep(_encode(SASL_AUTHENTICATE, version, correlation_id, response),
                        failure=failure, complete=self.complete)

    def _evaluate(self, token: bytes) -> bytes | None:
        assert self.server is not None
        challenge = self.server.evaluate(token)
        if self.server.complete:
            principal = self.principal_builder(self.server)
            if self._previous is not None and principal != self._previous[1]:
                prev = self._previous[1]
                raise SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from "
                    f"{prev.principal_type}.{prev.name}: {principal.principal_type}."
                    f"{principal.name}")
            self.principal = principal
            self.state = SaslState.COMPLETE
        return challenge

    def authenticate(self, request, version: int):
        """One SaslAuthenticate request -> (SaslAuthenticateResponse, failure message or
        None). Used for the initial exchange and for re-authentication."""
        if version > 0:
            self.supports_reauth = True
        if self.state is SaslState.REAUTH_BAD_MECHANISM:
            self.state = SaslState.FAILED
            return (SaslAuthenticateResponse(
                error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                error_message=self._bad_mechanism_message), self._bad_mechanism_message)
        if self.state is not SaslState.AUTHENTICATE:
            message = "SaslAuthenticate request received after successful authentication"
            return SaslAuthenticateResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
                                            error_message=message), None
        try:
            challenge = self._evaluate(bytes(request.auth_bytes or b""))
        except SaslAuthenticationError as e:
            self.state = SaslState.FAILED
            return (SaslAuthenticateResponse(
                error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED), error_message=str(e)),
                str(e))
        except SaslCredentialError as e:
            self.state = SaslState.FAILED
            what = "re-authentication" if self.reauthenticating else "authentication"
            message = (f"Authentication failed during {what} due to invalid credentials with "
                       f"SASL mechanism {self.mechanism}")
            return (SaslAuthenticateResponse(
                error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED), error_message=message),
                f"{message} ({e})")
        except IllegalSaslStateError as e:
            self.state = SaslState.FAILED
            return (SaslAuthenticateResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
                                             error_message=str(e)), str(e))
        lifetime = self._session_lifetime_ms() if self.complete else 0
        return SaslAuthenticateResponse(error_code=0, auth_bytes=challenge or b"",
                                        session_lifetime_ms=lifetime), None

    def _session_lifetime_ms(self) -> int:
        """Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``."""
        assert self.server is not None and self.mechanism is not None
        now = int(self.time_ms())
        expiry = self.server.credential_expiry_ms
        max_reauth = self.reauth_ms(self.mechanism) or 0
        if expiry is None and max_reauth <= 0:
            self.session_expiry_ms = None
            return 0
        if expiry is None:
            lifetime = max(0, max_reauth)
        elif max_reauth <= 0:
            lifetime = max(0, expiry - now)
        else:
            lifetime = max(0, min(expiry - now, max_reauth))
        self.session_expiry_ms = now + lifetime
        return lifetime

    # ---- re-authentication (KIP-368) ----------------------------------------------------------
    def begin_reauthentication(self, mechanism: str):
        """A SaslHandshake on an authenticated connection: returns the SaslHandshakeResponse
        (the new exchange then continues through :meth:`authenticate`)."""
        assert self.principal is not None and self.mechanism is not None
        self._previous = (self.mechanism, self.principal)
        self.reauthenticating = True
        enabled = list(self.mechanisms)
        if mechanism not in enabled:
            self.state = SaslState.FAILED
            return SaslHandshakeResponse(error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                                         mechanisms=enabled), \
                f"Unsupported SASL mechanism {mechanism}"
        if mechanism != self.mechanism:
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self.mechanism}'")
            self.state = SaslState.REAUTH_BAD_MECHANISM
        else:
            self._start(mechanism)
        return SaslHandshakeResponse(error_code=0, mechanisms=enabled), None

    def session_expired(self, now_ms: float) -> bool:
        """True once the session lifetime passed without a completed re-authentication."""
        return (self.state is SaslState.COMPLETE and self.session_expiry_ms is not None
                and now_ms >= self.session_expiry_ms)


def _default_principal(server: SaslServer) -> KafkaPrincipal:
    if server.principal_override is not None:
        return server.principal_override
    return KafkaPrincipal("User", server.authorization_id or "")


def _encode(api_key: int, version: int, correlation_id: int, response) -> bytes:
    head = encode_response_header(correlation_id, response_header_version(api_key, version))
    return head + api.encode_response(response, version)


def _error_response(frame, code: ErrorCode, message: str) -> bytes | None:
    """The request's own error response with ``code`` (Kafka's ``getErrorResponse``), or
    None when the request cannot be read or has no error response."""
    from broker.handlers.registry import REGISTRY

    try:
        header, offset = decode_request_header(memoryview(frame))
        handler = REGISTRY.get(header.api_key)
        if handler is None or handler.error_response is None:
            return None
        request = api.API_KEYS[header.api_key].request_cls.decode(memoryview(frame),
                                                                  header.api_version, offset)
        response = handler.error_response(request, header.api_version,
                                          KafkaError(code, message))
        return _encode(header.api_key, header.api_version, header.correlation_id, response)
    except Exception:  # noqa: BLE001 - no response then
        return None
