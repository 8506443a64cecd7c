"""The gate in front of a starting broker's dispatcher (``broker.server`` step 8).

Kafka binds its listeners before it registers and enables request processing last; Josef
binds first too (the kernel backlog holds connections) and puts this gate between the
RequestChannel and the ``ApiDispatcher`` until the broker can answer like a started broker.
"""

from __future__ import annotations

import asyncio
import inspect

from broker.dispatcher import ApiDispatcher
from broker.request_channel import PARKED, Request, Response

__all__ = ["StartupGate"]


class StartupGate:
    """The RequestChannel handler until the broker can answer like a started Kafka broker.

    ``open`` (startup finished): requests from the controller (LeaderAndIsr, StopReplica,
    UpdateMetadata), the inter-broker requests to the controller (ControlledShutdown,
    AlterPartition) and ApiVersions are dispatched. ``metadata_ready`` (an UpdateMetadata
    from the controller listing this broker reached the MetadataCache, or
    ``broker.server.METADATA_WAIT_S`` passed): every request is. So a client's first Metadata
    names the live controller and brokers instead of ``controller_id -1`` and no brokers
    (librdkafka's admin client then waited for a controller until its request timed out). Once fully open it returns the dispatcher's own
    outcome (no extra frame)."""

    #: dispatched as soon as startup finished (they make the MetadataCache, or need none)
    EARLY_APIS = frozenset({4, 5, 6, 7, 18, 56})

    def __init__(self, dispatcher: ApiDispatcher) -> None:
        self.dispatcher = dispatcher
        self.open = asyncio.Event()
        self.metadata_ready = asyncio.Event()
        self.aborted = False

    def abort(self) -> None:
        """Startup failed: waiting requests close their connections instead of waiting."""
        self.aborted = True
        self.open.set()
        self.metadata_ready.set()

    def __call__(self, request: Request):
        if self.metadata_ready.is_set() and not self.aborted:
            return self.dispatcher(request)
        if self.open.is_set() and not self.aborted and request.api_key in self.EARLY_APIS:
            return self.dispatcher(request)
        return self._wait_then(request)

    async def _wait_then(self, request: Request):
        await self.open.wait()
        if request.api_key not in self.EARLY_APIS:
            await self.metadata_ready.wait()
        if self.aborted:
            return Response.close_connection()
        result = self.dispatcher(request)
        if inspect.isawaitable(result) and not isinstance(result, PARKED):
            result = await result
        return result
