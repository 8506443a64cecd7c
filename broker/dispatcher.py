"""The API dispatcher: turns a Request from the network layer into a Response.

Steps for every frame (Kafka's ``KafkaApis.handle`` + ``RequestChannel`` parsing):

1. decode the request header; an unknown API key or a header that cannot be read closes the
   connection (Kafka's ``InvalidRequestException`` path);
2. a version outside what we register: ApiVersions answers UNSUPPORTED_VERSION (35) with the
   supported ranges in a v0 body (KIP-511); any other API closes the connection;
3. decode the body (trailing bytes ignored: librdkafka sends some); malformed -> close;
4. call the registered handler; a ``KafkaError`` it raises becomes the handler's error response
   carrying that code for every topic/partition; any other exception becomes
   UNKNOWN_SERVER_ERROR (-1) there, and is logged;
5. encode the response header (v0/v1 by ``response_header_version``) and body parts; record
   payloads that are file slices stay file slices so the network layer can ``sendfile`` them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from broker.handlers.registry import CLOSE_CONNECTION, NO_RESPONSE, REGISTRY, HandlerRegistry
from broker.request_channel import PARKED, Deferred, Request, Response
from protocol import api
from protocol.errors import ErrorCode, KafkaError, ProtocolError
from protocol.headers import (
    RequestHeader,
    decode_request_header,
    encode_response_header,
    response_header_version,
)
from protocol.messages import Message

__all__ = ["ApiDispatcher", "RequestContext"]

log = logging.getLogger(__name__)

API_VERSIONS = 18


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: RequestHeader
    api_version: int
    connection_id: str
    client_address: Any
    listener: str
    received_ns: int
    broker: Any  # broker.server.BrokerServices
    #: broker.security.listeners.Session of the connection (None: no security configured)
    session: Any = None
    #: the connection's Processor (None for requests made up in tests)
    processor: Any = None
    #: bytes of the request frame (produce quotas)
    request_size: int = 0

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def principal(self) -> Any:
        """The connection's ``KafkaPrincipal`` (``User:ANONYMOUS`` without a session)."""
        session = self.session
        if session is None:
            from broker.security.principal import ANONYMOUS
            return ANONYMOUS
        return session.principal


class ApiDispatcher:
    """The ``handler`` the RequestChannel's IO workers call (see broker.request_channel)."""

    def __init__(self, broker: Any, registry: HandlerRegistry = REGISTRY) -> None:
        self.broker = broker
        self.registry = registry
        # (api_key, api_version) -> (request decoder, response header version), filled on
        # first use so the per-request path does no table lookups
        self._codecs: dict[tuple[int, int], tuple[Any, int]] = {}

    def __call__(self, request: Request) -> Response | None | asyncio.Future | Awaitable:
        """Plain function on the hot path: a synchronous handler's outcome is returned as it
        is (no coroutine per request); an async handler's outcome comes back as an awaitable
        that the RequestChannel worker awaits."""
        frame = request.frame
        key, version = request.api_key, request.api_version
        handler = self.registry.get(key)
        if handler is None:
            log.info("closing %s: unsupported api key %d", request.connection_id, key)
            return Response.close_connection()
        if not handler.min_version <= version <= handler.max_version:
            if key == API_VERSIONS:
                return self._unsupported_api_versions(request.correlation_id)
            log.info("closing %s: unsupported version %d of api key %d",
                     request.connection_id, version, key)
            return Response.close_connection()
        try:
            codecs = self._codecs.get((key, version))
            if codecs is None:
                codecs = self._codecs[(key, version)] = (
                    api.api_spec(key).request_cls.decode, response_header_version(key, version))
            header, offset = decode_request_header(frame)
            body = codecs[0](frame, version, offset)
        except ProtocolError as e:
            log.info("closing %s: cannot parse api key %d v%d: %s",
                     request.connection_id, key, version, e)
            return Response.close_connection()
        request.body = body
        processor = request.processor
        ctx = RequestContext(header, version, request.connection_id, request.client_address,
                             request.listener, request.received_ns, self.broker,
                             getattr(processor, "session", None), processor, frame.nbytes)
        quotas = self._quotas
        started = time.perf_counter() if quotas is not None and quotas.request.enabled else 0.0
        try:
            result = handler.fn(ctx, body)
        except Exception as e:  # noqa: BLE001 - every failure becomes an error response
            return self._error(request, handler, body, version, e)
        if started:
            self._request_quota(ctx, result, time.perf_counter() - started)
        if isinstance(result, Message):  # the common case: a response to encode now
            return self._encode(request, result)
        if isinstance(result, PARKED):
            return self._chain(request, handler, body, version, result)
        if inspect.isawaitable(result):
            return self._finish_async(request, handler, body, version, result)
        return self._encode(request, result)

    @property
    def _quotas(self):
        security = getattr(self.broker, "security", None)
        return security.quotas if security is not None else None

    @staticmethod
    def _request_quota(ctx: RequestContext, result, seconds: float) -> None:
        """``request_percentage`` (KIP-124): record the handler's time; when over the quota
        the response gets the throttle time and the connection is muted (KIP-219)."""
        from broker.handlers import throttling

        ms = throttling.request_time(ctx, seconds)
        if ms <= 0:
            return
        if isinstance(result, Message) and hasattr(result, "throttle_time_ms"):
            result.throttle_time_ms = max(result.throttle_time_ms or 0, ms)
        throttling.throttle(ctx, ms)

    async def _finish_async(self, request: Request, handler, body, version: int,
                            awaitable: Awaitable) -> Response | None | asyncio.Future:
        """The rest of ``__call__`` for a handler that returned an awaitable (async def)."""
        try:
            result = await awaitable
        except Exception as e:  # noqa: BLE001 - every failure becomes an error response
            return self._error(request, handler, body, version, e)
        if isinstance(result, PARKED):
            return self._chain(request, handler, body, version, result)
        return self._encode(request, result)

    def _chain(self, request, handler, body, version, fut):
        """The encoded response once ``fut`` completes: a Future for a Future, a Deferred
        (completed in the same call) for a Deferred."""
        out = Deferred() if isinstance(fut, Deferred) else \
            asyncio.get_running_loop().create_future()

        def done(f: asyncio.Future) -> None:
            if out.done():
                return
            if f.cancelled():
                out.set_result(Response.close_connection())
                return
            exc = f.exception()
            try:
                if exc is not None:
                    out.set_result(self._error(request, handler, body, version, exc))
                else:
                    out.set_result(self._encode(request, f.result()))
            except Exception as e:  # noqa: BLE001
                log.exception("failed to encode a delayed response")
                out.set_exception(e)

        fut.add_done_callback(done)
        return out

    def _encode(self, request: Request, result: Any) -> Response | None:
        if result is NO_RESPONSE or result is None:
            return None
        if result is CLOSE_CONNECTION:
            return Response.close_connection()
        request.response_msg = result
        key, version = request.api_key, request.api_version
        codecs = self._codecs.get((key, version))
        header_version = codecs[1] if codecs is not None else response_header_version(key,
                                                                                     version)
        head = encode_response_header(request.correlation_id, header_version)
        parts = result.encode_parts(version)
        return Response([head, *parts])

    def _error(self, request, handler, body, version, exc: BaseException) -> Response | None:
        if isinstance(exc, KafkaError):
            error = exc
        else:
            log.exception("error handling api key %d v%d from %s", request.api_key, version,
                          request.connection_id, exc_info=exc)
            error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        if handler.error_response is None:
            return Response.close_connection()
        try:
            response = handler.error_response(body, version, error)
        except Exception:  # noqa: BLE001
            log.exception("error response for api key %d failed", request.api_key)
            return Response.close_connection()
        return self._encode(request, response)

    def _unsupported_api_versions(self, correlation_id: int) -> Response:
        """KIP-511: an ApiVersions version we do not know is answered in v0 with the ranges."""
        resp = api.API_KEYS[API_VERSIONS].response_cls(
            error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self.api_versions_list())
        head = encode_response_header(correlation_id, 0)
        return Response([head, api.encode_response(resp, 0)])

    def api_versions_list(self) -> list:
        cls = api.API_KEYS[API_VERSIONS].response_cls.ApiVersion
        return [cls(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in self.registry.supported()]
