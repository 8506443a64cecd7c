"""The handler registry: which API keys and versions this broker serves, and by whom.

Each handler module registers its functions with ``@handles(api_key, min_version, max_version,
error_response=...)``. ApiVersions is derived from this registry, so the broker never
advertises a version nobody handles (DESIGN.md, "Examples to follow" 1).

A handler is ``fn(ctx: RequestContext, request) -> response | NO_RESPONSE | Future | Awaitable``:

* a response message object (encoded with the request's version by the dispatcher);
* ``NO_RESPONSE`` (acks=0 produce);
* ``CLOSE_CONNECTION`` (acks=0 produce failure: Kafka closes the connection);
* an ``asyncio.Future`` resolving to one of the above (a DelayedProduce/DelayedFetch parked in
  the purgatory); :func:`then` turns a ReplicaManager result that may be such a Future into
  the response (or a Future of it).

``error_response(request, version, error: KafkaError) -> response`` builds the response that
carries ``error.code`` in every topic/partition of the request (Kafka's ``getErrorResponse``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CLOSE_CONNECTION", "NO_RESPONSE", "ApiHandler", "REGISTRY", "error_code_response",
           "handles", "then"]


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_RESPONSE = _Marker("NO_RESPONSE")
CLOSE_CONNECTION = _Marker("CLOSE_CONNECTION")


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    fn: Callable[..., Any]
    error_response: Callable[[Any, int, Exception], Any] | None


class HandlerRegistry:
    """api_key -> ApiHandler. Registration fails loudly on a duplicate key."""

    def __init__(self) -> None:
        self._handlers: dict[int, ApiHandler] = {}

    def register(self, handler: ApiHandler) -> None:
        if handler.api_key in self._handlers:
            raise ValueError(f"api key {handler.api_key} registered twice")
        self._handlers[handler.api_key] = handler

    def get(self, api_key: int) -> ApiHandler | None:
        return self._handlers.get(api_key)

    def supported(self) -> list[tuple[int, int, int]]:
        """``(api_key, min_version, max_version)`` for every registered API, by key."""
        return [(h.api_key, h.min_version, h.max_version)
                for h in sorted(self._handlers.values(), key=lambda h: h.api_key)]

    def __contains__(self, api_key: int) -> bool:
        return api_key in self._handlers


REGISTRY = HandlerRegistry()


def handles(api_key: int, min_version: int, max_version: int,
            error_response: Callable[[Any, int, Exception], Any] | None = None):
    """Decorator: register ``fn`` as the handler of ``api_key`` for the version range."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY.register(ApiHandler(api_key, min_version, max_version, fn, error_response))
        return fn
    return deco


def error_code_response(response_cls: Callable[..., Any], **fields: Any
                        ) -> Callable[[Any, int, Exception], Any]:
    """The ``error_response`` of an API whose response has one top-level error code:
    ``response_cls(error_code=error.code, **fields)``, every other field at its default
    (``fields`` must be immutable values: they are shared by every response)."""
    def build(request: Any, version: int, error: Any) -> Any:
        return response_cls(error_code=int(error.code), **fields)
    return build


def then(result: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn(result)`` at once, or - when ``result`` is an ``asyncio.Future`` (an operation
    parked in a purgatory) - a Future of ``fn`` applied to its value. A cancelled source
    cancels the returned Future; an exception of the source or of ``fn`` is set on it (the
    dispatcher turns it into the request's error response)."""
    if not isinstance(result, asyncio.Future):
        return fn(result)
    out = asyncio.get_running_loop().create_future()

    def done(f: asyncio.Future) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        try:
            out.set_result(fn(f.result()))
        except Exception as e:  # noqa: BLE001 - the dispatcher turns it into an error
            out.set_exception(e)

    result.add_done_callback(done)
    return out
