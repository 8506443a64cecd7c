"""Requests, responses and the RequestChannel served by the IO worker pool.

The asyncio edition of Kafka's ``RequestChannel`` + ``KafkaRequestHandlerPool``: Processors
(``broker.network``) put every complete request frame on one queue; ``num.io.threads`` IO
worker tasks take requests off it and call the broker's API dispatcher, an injected

    async def handler(request: Request) -> Response | None | asyncio.Future[Response | None]

The result goes back to the request's connection, which sends responses in request order.

* ``Response``: send it (the network layer writes the 4-byte size prefix).
* ``None``: send nothing (acks=0 produce).
* ``Response.close_connection()``: close the connection once every earlier response of that
  connection has been sent (acks=0 produce failure, request that cannot be parsed).
* an ``asyncio.Future`` resolving to one of the above: the handler parked the request (a
  DelayedProduce/DelayedFetch in the purgatory); the worker is free at once and the response is
  sent when the future completes. A future failing with an exception closes the connection.
  A :class:`Deferred` is the same, delivered the moment it completes (no loop turn: a group
  coordinator answers a SyncGroup leader before any later request is read).
* raising an exception: logged, and the connection is closed (the dispatcher is expected to
  turn Kafka errors into error responses itself; Kafka's ``getErrorResponse``).

The handler may also be a plain function returning the same things.

``queued.max.requests`` bounds the queue (Kafka's data-plane request queue, "the number of
queued requests allowed before blocking the network threads"): a processor never puts a request
on a full channel. It keeps the request, pauses reading its connection and registers with
``wait_for_room``; each time an IO worker takes a request off the queue, the longest-waiting
processors are called back (``RequestConnection.channel_has_room``) while there is room, FIFO.

The channel knows the connections only as :class:`RequestConnection` (the ``processor`` of a
``Request``): the callbacks a connection gives it. ``broker.processor`` implements them and
``broker.network`` wires both, so the chain is one-way: network -> processor ->
request_channel (Kafka's SocketServer: Acceptor -> Processor -> RequestChannel).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import IO, Any, NamedTuple, Protocol

__all__ = ["FileSlice", "Handler", "Request", "RequestChannel", "RequestConnection", "Response"]

log = logging.getLogger(__name__)

MAX_RESPONSE_SIZE = 2**31 - 1  # int32 frame size


class FileSlice(NamedTuple):
    """``length`` bytes of an open file from byte ``position``; sent with ``sendfile``.

    ``file`` is an int file descriptor or a file object with ``fileno()``. The network layer
    reads it by offset only (``os.sendfile`` with an offset, ``os.pread``): it neither moves the
    file position nor closes the file. The owner must keep the file open until the response
    has been sent.
    """

    file: int | IO[bytes]
    position: int
    length: int

    def fileno(self) -> int:
        return self.file if isinstance(self.file, int) else self.file.fileno()


Part = bytes | bytearray | memoryview | FileSlice


class Response:
    """A response frame body as parts; the 4-byte size prefix is added when sending.

    ``parts`` is one bytes-like object or an iterable whose items are bytes-like, a
    ``(file, position, length)`` tuple (made a ``FileSlice``), or an object with a ``slices``
    attribute listing such tuples (storage's ``FileRecords``; expanded in order). Bytes-like parts
    are sent as they are: do not mutate them until the response is sent.
    """

    __slots__ = ("parts", "size", "close", "has_file_parts", "memory_size")

    def __init__(self, parts: Part | Iterable[Any] = (), *, close: bool = False) -> None:
        if isinstance(parts, (bytes, bytearray, memoryview)):
            flat: list[Part] = [parts]
        else:
            flat = []
            for p in parts:
                if isinstance(p, (bytes, bytearray, memoryview, FileSlice)):
                    flat.append(p)
                elif isinstance(p, tuple) and len(p) == 3:
                    flat.append(FileSlice(*p))
                elif hasattr(p, "slices"):
                    flat.extend(FileSlice(*s) for s in p.slices)
                else:
                    raise TypeError(f"unsupported response part {type(p).__name__}")
        size = memory = 0
        files = False
        for p in flat:
            if isinstance(p, FileSlice):
                if p.position < 0 or p.length < 0:
                    raise ValueError(f"bad file slice {p}")
                size += p.length
                files = True
            else:
                n = p.nbytes if isinstance(p, memoryview) else len(p)
                size += n
                memory += n
        if size > MAX_RESPONSE_SIZE:
            raise ValueError(f"response of {size} bytes does not fit an int32 frame size")
        self.parts = flat
        self.size = size
        self.close = close
        self.has_file_parts = files
        self.memory_size = memory  # bytes held in memory (file slices excluded)

    @classmethod
    def close_connection(cls) -> Response:
        """A response that sends nothing and closes the connection at its turn."""
        return cls((), close=True)

    def __repr__(self) -> str:
        kind = "close" if self.close else f"{self.size} bytes in {len(self.parts)} parts"
        return f"Response({kind})"


class RequestConnection(Protocol):
    """What the RequestChannel calls back on the connection a request came from
    (``Request.processor``; ``broker.processor.ProcessorBase`` implements it).

    * ``closed``: True once the connection is gone; its queued requests are dropped.
    * ``channel_has_room()``: the queue dropped below ``queued.max.requests`` (after
      ``RequestChannel.wait_for_room``).
    * ``handler_done(request)``: the handler returned for ``request`` (response or parked);
      returns the connection's next pending request for the same worker, or None.
    * ``response_ready(request, response)``: the outcome of ``request`` is known (a
      ``Response`` or None: send nothing).
    """

    closed: bool

    def channel_has_room(self) -> None: ...

    def handler_done(self, request: Request) -> Request | None: ...

    def response_ready(self, request: Request, response: Response | None) -> None: ...


class Request:
    """One request frame received on a connection, with its header peeked.

    ``frame`` is the whole frame body after the 4-byte size: request header then request body,
    in a writable buffer owned by this request (records may be patched in place).
    ``received_ns`` is ``time.monotonic_ns()`` when the frame was complete. ``sequence`` numbers
    the requests of one connection from 0; responses leave in that order.
    ``dequeue_ns`` / ``local_ns`` / ``response_ns`` / ``send_start_ns`` are the later
    monotonic stamps (0 until reached; see ``broker.metrics.request_metrics``); ``body`` is the
    decoded request and ``response_msg`` the response message once the dispatcher has them
    (for the request log); ``response`` the outcome while it waits for its turn to be sent.
    """

    __slots__ = ("connection_id", "sequence", "received_ns", "api_key", "api_version",
                 "correlation_id", "frame", "listener", "client_address", "processor",
                 "dequeue_ns", "local_ns", "response_ns", "send_start_ns", "body",
                 "response_msg", "response")

    def __init__(self, connection_id: str, sequence: int, received_ns: int, api_key: int,
                 api_version: int, correlation_id: int, frame: memoryview, listener: str,
                 client_address: Any, processor: RequestConnection | None = None) -> None:
        self.connection_id = connection_id
        self.sequence = sequence
        self.received_ns = received_ns
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.frame = frame
        self.listener = listener
        self.client_address = client_address
        self.processor = processor
        self.dequeue_ns = self.local_ns = self.response_ns = self.send_start_ns = 0
        self.body = self.response_msg = self.response = None

    def __repr__(self) -> str:
        return (f"Request({self.connection_id} #{self.sequence} api_key={self.api_key} "
                f"v{self.api_version} correlation_id={self.correlation_id} "
                f"{self.frame.nbytes} bytes)")


class Deferred:
    """A parked outcome that is delivered the moment it is completed, with no loop turn in
    between (an ``asyncio.Future`` runs its callbacks on a later turn of the loop).

    Kafka's coordinators answer a request inside the callback that completes it (the
    GroupCoordinator answers a SyncGroup leader in the callback of its ``__consumer_offsets``
    append, before the group is seen Stable); a Future would let a request read after that
    callback overtake the answer. Handlers return a Deferred where that order matters; the
    dispatcher and the RequestChannel treat it as they treat a Future (``done``,
    ``result``, ``exception``, ``cancelled``, ``add_done_callback``, ``cancel``), and it
    can be awaited (tests, coroutine handlers)."""

    __slots__ = ("_done", "_result", "_exception", "_cancelled", "_callbacks")

    def __init__(self) -> None:
        self._done = False
        self._result: Any = None
        self._exception: BaseException | None = None
        self._cancelled = False
        self._callbacks: list[Callable[[Deferred], None]] = []

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._cancelled

    def result(self) -> Any:
        if not self._done:
            raise asyncio.InvalidStateError("Deferred not completed")
        if self._cancelled:
            raise asyncio.CancelledError()
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        if self._cancelled:
            raise asyncio.CancelledError()
        return self._exception

    def set_result(self, value: Any) -> None:
        self._complete(value, None, False)

    def set_exception(self, exc: BaseException) -> None:
        self._complete(None, exc, False)

    def cancel(self) -> bool:
        if self._done:
            return False
        self._complete(None, None, True)
        return True

    def _complete(self, value: Any, exc: BaseException | None, cancelled: bool) -> None:
        if self._done:
            raise asyncio.InvalidStateError("Deferred already completed")
        self._done, self._result, self._exception, self._cancelled = True, value, exc, cancelled
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # noqa: BLE001 - one callback must not starve the others
                log.exception("Deferred callback failed")

    def add_done_callback(self, fn: Callable[[Deferred], None]) -> None:
        """Call ``fn(self)`` on completion, or at once when already completed."""
        if self._done:
            fn(self)
        else:
            self._callbacks.append(fn)

    def __await__(self):
        if not self._done:
            fut = asyncio.get_running_loop().create_future()

            def relay(d: Deferred) -> None:
                if fut.done():
                    return
                if d.cancelled():
                    fut.cancel()
                elif d.exception() is not None:
                    fut.set_exception(d.exception())
                else:
                    fut.set_result(d.result())

            self.add_done_callback(relay)
            yield from fut.__await__()
        return self.result()


#: what a handler may hand back for later: a Future, or a Deferred (delivered at once)
PARKED = (asyncio.Future, Deferred)

HandlerResult = Response | None | asyncio.Future[Response | None] | Deferred
Handler = Callable[[Request], Awaitable[HandlerResult] | HandlerResult]

_STOP = object()


class RequestChannel:
    """The request queue and its pool of ``num_io_threads`` IO worker tasks.

    Processors call ``send_request`` (only when not ``full``); workers call the handler and
    hand the outcome back to the request's connection (``RequestConnection.handler_done`` /
    ``RequestConnection.response_ready``). ``queued_max_requests`` is ``queued.max.requests``
    (Kafka default 500, >= 1).
    """

    def __init__(self, handler: Handler, num_io_threads: int = 8,
                 queued_max_requests: int = 500) -> None:
        if num_io_threads < 1:
            raise ValueError(f"num.io.threads must be >= 1, got {num_io_threads}")
        if queued_max_requests < 1:
            raise ValueError(f"queued.max.requests must be >= 1, got {queued_max_requests}")
        self.handler = handler
        self.num_io_threads = num_io_threads
        self.queued_max_requests = queued_max_requests
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._parked: set[asyncio.Future[Any]] = set()
        self._blocked: deque[RequestConnection] = deque()  # waiting for room, oldest first
        self.blocked_total = 0  # times a processor found the channel full

    @property
    def size(self) -> int:
        """Requests waiting for a worker."""
        return self._queue.qsize()

    @property
    def full(self) -> bool:
        """True while ``queued.max.requests`` requests wait for a worker."""
        return self._queue.qsize() >= self.queued_max_requests

    def wait_for_room(self, processor: RequestConnection) -> None:
        """Call ``processor.channel_has_room()`` once the queue is below its bound (FIFO among
        waiting processors). The processor registers once per wait."""
        self._blocked.append(processor)
        self.blocked_total += 1

    def _wake_blocked(self) -> None:
        blocked = self._blocked
        while blocked and not self.full:
            processor = blocked.popleft()
            if not processor.closed:
                processor.channel_has_room()

    def start(self) -> None:
        if self._workers:
            return
        self._workers = [asyncio.get_running_loop().create_task(self._run_worker(i),
                                                                name=f"io-worker-{i}")
                         for i in range(self.num_io_threads)]

    def resize(self, num_io_threads: int) -> None:
        """``num.io.threads`` changed (KIP-226): start more workers, or ask the newest ones
        to stop after the request in hand."""
        if num_io_threads < 1:
            raise ValueError(f"num.io.threads must be >= 1, got {num_io_threads}")
        self.num_io_threads = num_io_threads
        self._workers = [w for w in self._workers if not w.done()]
        if not self._workers:
            return  # not started: start() uses the new count
        loop = asyncio.get_running_loop()
        while len(self._workers) < num_io_threads:
            i = len(self._workers)
            self._workers.append(loop.create_task(self._run_worker(i), name=f"io-worker-{i}"))
        # the excess exits when it takes a stop marker (queued behind waiting requests);
        # finished tasks are dropped from the list at the next resize
        for _ in range(len(self._workers) - num_io_threads):
            self._queue.put_nowait(_STOP)

    def send_request(self, request: Request) -> None:
        self._queue.put_nowait(request)

    async def stop(self, timeout: float = 5.0) -> None:
        """Let workers finish the request in hand (up to ``timeout`` s), then end them."""
        for _ in self._workers:
            self._queue.put_nowait(_STOP)
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=timeout)
            for t in pending:
                t.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        self._blocked.clear()
        for fut in list(self._parked):
            fut.cancel()

    async def _run_worker(self, index: int) -> None:
        queue = self._queue
        handler = self.handler
        request = None
        while True:
            if request is None:
                request = await queue.get()
                if request is _STOP:
                    return
                if self._blocked:
                    self._wake_blocked()
            processor = request.processor
            if processor is not None and processor.closed:
                request = None
                continue  # connection gone while queued
            request.dequeue_ns = time.monotonic_ns()
            try:
                result = handler(request)
                # a Response (or None) from a plain handler needs no awaitable check
                if result is not None and not isinstance(result, Response) and not isinstance(
                        result, PARKED) and inspect.isawaitable(result):
                    result = await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handler failed on %r; closing the connection", request)
                result = Response.close_connection()
            request.local_ns = request.response_ns = time.monotonic_ns()
            if isinstance(result, PARKED):
                self._parked.add(result)
                result.add_done_callback(lambda fut, r=request: self._parked_done(r, fut))
                request = processor.handler_done(request) if processor is not None else None
                continue
            if result is not None and not isinstance(result, Response):
                log.error("handler returned %r for %r; closing the connection", result, request)
                result = Response.close_connection()
            if processor is None:
                request = None
                continue
            processor.response_ready(request, result)
            request = processor.handler_done(request)

    def _parked_done(self, request: Request, fut: asyncio.Future[Any]) -> None:
        self._parked.discard(fut)
        request.response_ns = time.monotonic_ns()
        processor = request.processor
        if processor is None:
            return
        if fut.cancelled():
            result: Response | None = Response.close_connection()
        elif fut.exception() is not None:
            log.error("parked response for %r failed; closing the connection", request,
                      exc_info=fut.exception())
            result = Response.close_connection()
        else:
            result = fut.result()
            if result is not None and not isinstance(result, Response):
                log.error("parked handler gave %r for %r; closing", result, request)
                result = Response.close_connection()
        processor.response_ready(request, result)
