"""ZkClient: kazoo bridged to asyncio (Kafka's ``ZooKeeperClient``).

kazoo runs its own threads (connection, callbacks). None of them ever runs broker code:

- every request uses kazoo's ``*_async`` API; the completion is handed to the event loop with
  ``loop.call_soon_threadsafe`` and awaited there, so no ZooKeeper call blocks the loop. At
  most ``zookeeper.max.in.flight.requests`` requests are outstanding (an ``asyncio``
  semaphore), as Kafka's ZooKeeperClient bounds them.
- watches: a request on a path for which a handler is registered sets a watch (Kafka's
  ``shouldWatch``); the watch event is handed to the loop and dispatched to the handler
  (:class:`ZNodeChangeHandler` ``on_create``/``on_delete``/``on_data_change``,
  :class:`ZNodeChildChangeHandler` ``on_child_change``). Handlers only enqueue work; the work
  re-reads the znode, which re-arms the watch.
- session events (kazoo listener states) reach :class:`StateChangeHandler` s on the loop:
  ``on_disconnected`` (connection lost, session may survive), ``on_reconnected`` (same
  session: kazoo dropped its watches on the disconnect, so every registered handler is fired
  once to re-read and re-arm), ``before_initializing_session`` (the session expired: Kafka's
  controller resigns here) and ``after_initializing_session`` (a new session: re-register
  ephemeral znodes, re-elect).
- requests are retried until connected (Kafka's ``retryRequestsUntilConnected``): a
  ``ConnectionLoss`` or ``SessionExpiredError`` waits for the next connection and resends.

Chroot: ``host:port[,host:port]/chroot`` is handled by kazoo; :meth:`ZkClient.start` first
creates the chroot path (connected without it) when it is missing, as Kafka does.
``zookeeper.set.acl``: every znode is created with ``CREATOR_ALL`` (+ world ``READ`` except
the sensitive ``/config/users``, ``/config/brokers``, ``/delegation_token`` subtrees), Kafka's
``ZkData.defaultAcls``; the creator identity is the session's authenticated identity
(``auth_data``, e.g. ``[("digest", "user:password")]``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, ZnodeStat
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from controller.zk_handler import PollThreadingHandler
from controller.zk_multi_read import GET_CHILDREN, GET_DATA, OPS_PER_REQUEST, MultiRead, ReadOp
from controller.zk_multi_write import (
    Multi,
    encode_acl,
    encode_check,
    encode_create,
    encode_delete,
    encode_set_data,
)

__all__ = [
    "BadVersionError", "CheckOp", "CreateOp", "DeleteOp", "KazooException", "NoNodeError",
    "NodeExistsError", "NotEmptyError", "RolledBackError", "SetDataOp", "StateChangeHandler",
    "ZNodeChangeHandler", "ZNodeChildChangeHandler", "ZkClient", "ZkConnectionTimeoutError",
    "ZnodeStat", "split_chroot",
]

log = logging.getLogger(__name__)

_RETRIABLE = (ConnectionLoss, SessionExpiredError, ConnectionClosedError, OperationTimeoutError)
_OPEN_ACL = list(OPEN_ACL_UNSAFE)
#: requests a bulk read keeps outstanding on the session (see ZkClient._bulk)
BULK_WINDOW = 100
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")


class ZkConnectionTimeoutError(Exception):
    """No ZooKeeper connection within ``zookeeper.connection.timeout.ms``."""


# ---------------------------------------------------------------------------- handlers


class ZNodeChangeHandler:
    """Watch one znode. Callbacks run on the event loop and must not block."""

    path: str = ""

    def on_create(self) -> None: ...

    def on_delete(self) -> None: ...

    def on_data_change(self) -> None: ...


class ZNodeChildChangeHandler:
    """Watch one znode's children. The callback runs on the event loop."""

    path: str = ""

    def on_child_change(self) -> None: ...


class StateChangeHandler:
    """Session events, on the event loop (see the module docstring)."""

    name: str = ""

    def on_disconnected(self) -> None: ...

    def on_reconnected(self) -> None: ...

    def before_initializing_session(self) -> None: ...

    def after_initializing_session(self) -> None: ...


# ---------------------------------------------------------------------------- multi ops
# NamedTuples (immutable, built in C): a failover writes 100,000 partition states. Told
# apart by type (isinstance), never compared.


class CreateOp(NamedTuple):
    path: str
    data: bytes | None = None
    ephemeral: bool = False
    sequential: bool = False


class SetDataOp(NamedTuple):
    path: str
    data: bytes | None
    version: int = -1


class DeleteOp(NamedTuple):
    path: str
    version: int = -1


class CheckOp(NamedTuple):
    path: str
    version: int


ZkOp = CreateOp | SetDataOp | DeleteOp | CheckOp


def split_chroot(connect: str) -> tuple[str, str | None]:
    """``"h1:2181,h2:2181/josef"`` -> ``("h1:2181,h2:2181", "/josef")``; no chroot -> None.
    A chroot of ``/`` means none."""
    slash = connect.find("/")
    if slash < 0:
        return connect, None
    hosts, chroot = connect[:slash], connect[slash:].rstrip("/")
    return hosts, chroot or None


class ZkClient:
    """One ZooKeeper session for the broker (see the module docstring).

    ``connect`` is ``zookeeper.connect`` (chroot allowed), times in ms. Create it and call
    ``await start()`` from the event loop; ``await close()`` ends the session."""

    def __init__(self, connect: str, *, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None, max_in_flight: int = 10,
                 secure: bool = False, auth_data: list[tuple[str, str]] | None = None,
                 name: str = "josef") -> None:
        self.connect = connect
        self.hosts, self.chroot = split_chroot(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.max_in_flight = max(1, max_in_flight)
        self.secure = secure
        self.auth_data = auth_data
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kazoo: KazooClient | None = None
        self._sem: asyncio.Semaphore | None = None
        self._connected: asyncio.Event | None = None
        self._closing = False
        self._lost = False
        self._session_id: int | None = None
        self._data_handlers: dict[str, ZNodeChangeHandler] = {}
        self._child_handlers: dict[str, ZNodeChildChangeHandler] = {}
        self._state_handlers: dict[str, StateChangeHandler] = {}
        self.requests_sent = 0
        self._multi_read_unsupported = False
        self._acl_bytes: dict[tuple, bytes] = {}  # encoded ACL vectors (multi)

    # ------------------------------------------------------------------ lifecycle

    def _new_kazoo(self, hosts: str) -> KazooClient:
        return KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000.0,
                           handler=PollThreadingHandler(),
                           auth_data=self.auth_data, connection_retry={"max_tries": -1,
                                                                        "delay": 0.1,
                                                                        "max_delay": 1.0})

    async def _start_kazoo(self, client: KazooClient) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.connection_timeout_ms / 1000.0
        try:
            await loop.run_in_executor(None, lambda: client.start(timeout=timeout))
        except KazooTimeoutError:
            await loop.run_in_executor(None, _stop_quietly, client)
            raise ZkConnectionTimeoutError(
                f"Timed out waiting for connection to ZooKeeper ({self.hosts}) while in state: "
                f"CONNECTING (zookeeper.connection.timeout.ms={self.connection_timeout_ms})"
            ) from None

    async def start(self) -> None:
        """Connect (creating the chroot when missing). Raises ZkConnectionTimeoutError after
        ``connection_timeout_ms`` without a connection."""
        self._loop = asyncio.get_running_loop()
        self._sem = asyncio.Semaphore(self.max_in_flight)
        self._connected = asyncio.Event()
        if self.chroot:
            bootstrap = self._new_kazoo(self.hosts)
            await self._start_kazoo(bootstrap)
            try:
                if await self._loop.run_in_executor(None, bootstrap.exists, self.chroot) is None:
                    log.info("creating chroot %s in ZooKeeper", self.chroot)
                    with contextlib.suppress(NodeExistsError):
                        await self._loop.run_in_executor(
                            None, lambda: bootstrap.create(self.chroot, b"", acl=self._acl(
                                self.chroot), makepath=True))
            finally:
                await self._loop.run_in_executor(None, _stop_quietly, bootstrap)
        client = self._new_kazoo(self.connect)
        client.add_listener(self._on_kazoo_state)
        self._kazoo = client
        await self._start_kazoo(client)
        self._session_id = client.client_id[0] if client.client_id else None
        self._connected.set()
        log.info("connected to ZooKeeper %s (session 0x%x)", self.connect, self._session_id or 0)

    async def close(self) -> None:
        self._closing = True
        client = self._kazoo
        self._kazoo = None
        if client is not None and self._loop is not None:
            await self._loop.run_in_executor(None, _stop_quietly, client)
        if self._connected is not None:
            self._connected.set()  # wake retry loops so they see _closing

    @property
    def session_id(self) -> int:
        """The current session id (0 before the first connection)."""
        return self._session_id or 0

    @property
    def is_connected(self) -> bool:
        return self._connected is not None and self._connected.is_set() and not self._closing

    # ------------------------------------------------------------------ session events

    def _on_kazoo_state(self, state: str) -> None:
        """kazoo thread: hand the transition to the loop."""
        client = self._kazoo
        session = client.client_id[0] if client is not None and client.client_id else None
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._state_changed, state, session)

    def _state_changed(self, state: str, session: int | None) -> None:
        if self._closing:
            return
        handlers = list(self._state_handlers.values())
        if state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection lost (session 0x%x); waiting to reconnect",
                        self.session_id)
            self._connected.clear()
            for h in handlers:
                _safe(h.on_disconnected)
        elif state == KazooState.LOST:
            log.warning("ZooKeeper session 0x%x expired", self.session_id)
            self._connected.clear()
            self._lost = True
            for h in handlers:
                _safe(h.before_initializing_session)
        elif state == KazooState.CONNECTED:
            new_session = self._lost or (session is not None and session != self._session_id)
            self._session_id = session
            self._lost = False
            self._connected.set()
            if new_session:
                log.info("new ZooKeeper session 0x%x", session or 0)
                for h in handlers:
                    _safe(h.after_initializing_session)
            else:
                log.info("reconnected to ZooKeeper (session 0x%x)", session or 0)
                for h in handlers:
                    _safe(h.on_reconnected)
            self._fire_all_handlers()

    def _fire_all_handlers(self) -> None:
        """After a reconnect kazoo has forgotten its watches: let every handler re-read."""
        for h in list(self._child_handlers.values()):
            _safe(h.on_child_change)
        for h in list(self._data_handlers.values()):
            _safe(h.on_data_change)

    def register_state_handler(self, handler: StateChangeHandler) -> None:
        self._state_handlers[handler.name] = handler

    def unregister_state_handler(self, name: str) -> None:
        self._state_handlers.pop(name, None)

    # ------------------------------------------------------------------ watches

    def register_znode_change_handler(self, handler: ZNodeChangeHandler) -> None:
        self._data_handlers[handler.path] = handler

    def unregister_znode_change_handler(self, path: str) -> None:
        self._data_handlers.pop(path, None)

    def register_znode_child_change_handler(self, handler: ZNodeChildChangeHandler) -> None:
        self._child_handlers[handler.path] = handler

    def unregister_znode_child_change_handler(self, path: str) -> None:
        self._child_handlers.pop(path, None)

    async def register_znode_change_handler_and_check_existence(
            self, handler: ZNodeChangeHandler) -> bool:
        """Register ``handler`` and arm its watch; True when the znode exists."""
        self.register_znode_change_handler(handler)
        return await self.exists(handler.path) is not None

    def _watcher(self, event) -> None:
        """kazoo thread: a watch fired."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._dispatch_watch, event.type, event.path)

    def _dispatch_watch(self, event_type: str, path: str | None) -> None:
        if self._closing or path is None or event_type == EventType.NONE:
            return
        path = self._unroot(path)
        if event_type == EventType.CHILD:
            h = self._child_handlers.get(path)
            if h is not None:
                _safe(h.on_child_change)
            return
        h = self._data_handlers.get(path)
        if h is None:
            return
        if event_type == EventType.CREATED:
            _safe(h.on_create)
        elif event_type == EventType.DELETED:
            _safe(h.on_delete)
        elif event_type == EventType.CHANGED:
            _safe(h.on_data_change)

    def _unroot(self, path: str) -> str:
        if self.chroot and path.startswith(self.chroot):
            path = path[len(self.chroot):] or "/"
        return path

    # ------------------------------------------------------------------ requests

    async def _call(self, start: Callable[[KazooClient], Any]) -> Any:
        """Run one kazoo async request on the loop's terms; retried until connected."""
        backoff = 0.05
        while True:
            if self._closing or self._kazoo is None:
                raise ConnectionClosedError("ZooKeeper client is closed")
            await self._connected.wait()
            if self._closing or self._kazoo is None:
                raise ConnectionClosedError("ZooKeeper client is closed")
            async with self._sem:
                fut = self._loop.create_future()
                try:
                    result = start(self._kazoo)
                except _RETRIABLE:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 0.5)
                    continue
                self.requests_sent += 1
                result.rawlink(lambda r, f=fut: self._complete(f, r))
                try:
                    return await fut
                except _RETRIABLE as e:
                    if self._closing:
                        raise
                    log.debug("ZooKeeper request failed (%s); retrying once connected",
                              type(e).__name__)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

    async def _bulk(self, starts: list[Callable[[KazooClient], Any]],
                    window: int | None = None) -> list[tuple[Any, BaseException | None]]:
        """Many requests pipelined on the session: up to ``window`` (default
        :data:`BULK_WINDOW`) outstanding at once, not ``max_in_flight`` (ZooKeeper answers a
        session's requests in order, so one round trip carries thousands), and completions
        handed to the loop in batches (one wakeup for all that arrived meanwhile, not one
        per request). Returns ``(value, exception)`` per start, in order; a request lost to
        a ConnectionLoss or an expired session is sent again once connected. Kafka's
        controller reads partition states this way (ZooKeeperClient.handleRequests)."""
        window = window or BULK_WINDOW
        out: list[Any] = [None] * len(starts)
        todo = list(range(len(starts)))
        loop = self._loop
        while todo:
            if self._closing or self._kazoo is None:
                raise ConnectionClosedError("ZooKeeper client is closed")
            await self._connected.wait()
            kazoo = self._kazoo
            arrived: collections.deque = collections.deque()
            wake = asyncio.Event()
            lock = threading.Lock()
            armed = [False]

            def on_done(idx: int, result, arrived=arrived, wake=wake, lock=lock,
                        armed=armed) -> None:  # a kazoo thread
                try:
                    value, exc = result.get_nowait(), None
                except BaseException as e:  # noqa: BLE001 - carried to the loop
                    value, exc = None, e
                with lock:
                    arrived.append((idx, value, exc))
                    if armed[0]:
                        return
                    armed[0] = True
                if not loop.is_closed():
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(wake.set)

            retry: list[int] = []
            pos = outstanding = 0
            while pos < len(todo) or outstanding:
                while pos < len(todo) and outstanding < window and kazoo is not None:
                    idx = todo[pos]
                    pos += 1
                    try:
                        result = starts[idx](kazoo)
                    except _RETRIABLE:
                        retry.append(idx)
                        continue
                    self.requests_sent += 1
                    result.rawlink(functools.partial(on_done, idx))
                    outstanding += 1
                if not outstanding:
                    break
                await wake.wait()
                wake.clear()
                with lock:
                    batch = list(arrived)
                    arrived.clear()
                    armed[0] = False
                for idx, value, exc in batch:
                    outstanding -= 1
                    if isinstance(exc, _RETRIABLE):
                        retry.append(idx)
                    else:
                        out[idx] = (value, exc)
            todo = sorted(retry)
            if todo:
                await asyncio.sleep(0.05)
        return out

    def _complete(self, fut: asyncio.Future, result) -> None:
        """kazoo callback thread: copy the outcome to the loop."""
        try:
            value, exc = result.get_nowait(), None
        except BaseException as e:  # noqa: BLE001 - carried to the awaiting coroutine
            value, exc = None, e
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, fut, value, exc)

    def _acl(self, path: str) -> list:
        if not self.secure:
            return _OPEN_ACL
        acl = list(CREATOR_ALL_ACL)
        if not any(path == p or path.startswith(p + "/") for p in SENSITIVE_ROOT_PATHS):
            acl += list(READ_ACL_UNSAFE)
        return acl

    async def get_data(self, path: str) -> tuple[bytes | None, ZnodeStat] | None:
        """``(data, stat)`` or None for a missing znode; watches when a handler is registered."""
        watch = self._watcher if path in self._data_handlers else None
        try:
            return await self._call(lambda k: k.get_async(path, watch=watch))
        except NoNodeError:
            if watch is not None:
                await self.exists(path)  # arm an existence watch instead
            return None

    async def _multi_read(self, op_type: int, paths: list[str], handlers: dict
                          ) -> list[tuple[Any, BaseException | None]] | None:
        """Reads of ``paths`` in multiRead requests (ZooKeeper 3.6+, see
        :mod:`controller.zk_multi_read`), several in flight; None when the server does not
        know multiRead (then the caller pipelines single reads)."""
        if self._multi_read_unsupported:
            return None

        def start(chunk: list[str], k: KazooClient):
            root = k.chroot or ""  # our paths are absolute and normalised: no normpath
            ops = [ReadOp(op_type, root + p if p != "/" or not root else root, p in handlers)
                   for p in chunk]
            result = k.handler.async_result()
            k._call(MultiRead(ops, k, self._watcher), result)
            return result
        chunks = [paths[i:i + OPS_PER_REQUEST] for i in range(0, len(paths), OPS_PER_REQUEST)]
        try:
            parts = await asyncio.gather(*(self._call(functools.partial(start, c))
                                           for c in chunks))
        except UnimplementedError:
            log.info("ZooKeeper does not support multiRead (3.6+): reading one znode per "
                     "request")
            self._multi_read_unsupported = True
            return None
        return [(None, r) if isinstance(r, BaseException) else (r, None)
                for part in parts for r in part]

    async def get_data_many(self, paths: list[str]) -> list[tuple[bytes | None, ZnodeStat] | None]:
        """``get_data`` for many paths in multiRead requests (else pipelined single reads,
        see :meth:`_bulk`); None for a missing znode. Raises the first failure other than
        NoNode."""
        def start(path: str, k: KazooClient):
            return k.get_async(path, watch=self._watcher if path in self._data_handlers else None)
        got = await self._multi_read(GET_DATA, paths, self._data_handlers)
        if got is None:
            got = await self._bulk([functools.partial(start, p) for p in paths])
        out: list[Any] = []
        for path, (value, exc) in zip(paths, got, strict=True):
            if exc is None:
                out.append(value)
            elif isinstance(exc, NoNodeError):
                if path in self._data_handlers:
                    await self.exists(path)  # arm an existence watch instead
                out.append(None)
            else:
                raise exc
        return out

    async def get_children_many(self, paths: list[str]) -> list[list[str] | None]:
        """``get_children`` for many paths, pipelined; None for a missing znode."""
        def start(path: str, k: KazooClient):
            return k.get_children_async(
                path, watch=self._watcher if path in self._child_handlers else None)
        got = await self._multi_read(GET_CHILDREN, paths, self._child_handlers)
        if got is None:
            got = await self._bulk([functools.partial(start, p) for p in paths])
        out: list[Any] = []
        for value, exc in got:
            if exc is None:
                out.append(list(value))
            elif isinstance(exc, NoNodeError):
                out.append(None)
            else:
                raise exc
        return out

    async def exists(self, path: str) -> ZnodeStat | None:
        watch = self._watcher if path in self._data_handlers else None
        return await self._call(lambda k: k.exists_async(path, watch=watch))

    async def get_children(self, path: str) -> list[str] | None:
        """Children names, or None for a missing znode; watches when a child handler is
        registered for ``path``."""
        watch = self._watcher if path in self._child_handlers else None
        try:
            return list(await self._call(lambda k: k.get_children_async(path, watch=watch)))
        except NoNodeError:
            return None

    async def create(self, path: str, data: bytes | None = None, *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = False) -> str:
        """Create ``path``; returns the created path (sequential suffix included)."""
        value = data if data is not None else b""
        created = await self._call(lambda k: k.create_async(
            path, value, acl=self._acl(path), ephemeral=ephemeral, sequence=sequential,
            makepath=make_parents))
        return self._unroot(created) if isinstance(created, str) else created

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents when missing (Kafka's makeSurePersistentPathExists)."""
        if await self.exists(path) is not None:
            return
        with contextlib.suppress(NodeExistsError):
            await self.create(path, make_parents=True)

    async def set_data(self, path: str, data: bytes | None, version: int = -1) -> ZnodeStat:
        return await self._call(lambda k: k.set_async(path, data or b"", version))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(lambda k: k.delete_async(path, version))

    async def delete_recursive(self, path: str) -> bool:
        """Delete ``path`` and its subtree (children first); False if it did not exist."""
        children = await self.get_children(path)
        if children is None:
            return False
        await asyncio.gather(*(self.delete_recursive(f"{path.rstrip('/')}/{c}")
                               for c in children))
        try:
            await self.delete(path)
        except NoNodeError:
            return False
        except NotEmptyError:  # a child appeared meanwhile
            return await self.delete_recursive(path)
        return True

    async def multi(self, ops: list[ZkOp]) -> list[Any]:
        """Apply ``ops`` atomically (ZooKeeper ``multi``). Returns one result per op: the
        created path, a ZnodeStat for a set, True for delete/check; when the transaction
        failed, the failing op's kazoo exception, ``RolledBackError`` for the ops before it
        and ``RuntimeInconsistency`` for those after (ZooKeeper's codes). Serialized here, once (:mod:`controller.zk_multi_write`; a failover writes
        100,000 states); a retry after a lost connection resends the same bytes."""
        request: Multi | None = None
        root_of: str | None = None

        def start(k: KazooClient):
            nonlocal request, root_of
            root = k.chroot or ""
            if request is None or root_of != root:
                request, root_of = Multi(self._encode_ops(ops, root)), root
            result = k.handler.async_result()
            k._call(request, result)
            return result
        results = await self._call(start)
        return [self._unroot(r) if isinstance(r, str) else r for r in results]

    def _encode_ops(self, ops: list[ZkOp], root: str) -> list[bytes]:
        out = []
        for op in ops:
            path = root + op.path if op.path != "/" or not root else root
            if type(op) is SetDataOp:
                out.append(encode_set_data(path, op.data or b"", op.version))
            elif isinstance(op, CreateOp):
                acl = self._acl(op.path)
                key = tuple(acl)
                encoded_acl = self._acl_bytes.get(key)
                if encoded_acl is None:
                    encoded_acl = self._acl_bytes[key] = encode_acl(acl)
                out.append(encode_create(path, op.data or b"", encoded_acl,
                                         (1 if op.ephemeral else 0) | (2 if op.sequential else 0)))
            elif isinstance(op, SetDataOp):
                out.append(encode_set_data(path, op.data or b"", op.version))
            elif isinstance(op, DeleteOp):
                out.append(encode_delete(path, op.version))
            else:
                out.append(encode_check(path, op.version))
        return out


def _settle(fut: asyncio.Future, value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _safe(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.exception("ZooKeeper handler %r failed", fn)


def _stop_quietly(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # noqa: BLE001 - shutting down
        log.debug("error closing a kazoo client", exc_info=True)

