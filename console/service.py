"""How the console reaches the cluster: blocking protocol clients (:mod:`client`) run in a small
thread pool so the web server's event loop never waits on a socket, failover between brokers,
and what the console knows about each broker's state.

Failover: a client connects to the first answering address of the configured bootstrap
servers followed by every broker the cluster has reported (Metadata), addresses that failed
recently last. When the connected broker stops answering, the call is retried once on a new
client, so a page still loads while any broker is up (Kafka's clients do the same with their
bootstrap list and the brokers from Metadata). A request to one broker (``try_node``) that
fails marks that broker unreachable and answers ``None`` instead of failing the page.

Broker states (:class:`BrokerTracker`): ``online``; ``offline`` (seen earlier, or named as a
replica, but absent from the last Metadata; or present but not answering for
``OFFLINE_AFTER_S``); ``controlled shutdown`` (the broker's BrokerState metric, when it
publishes one, says PENDING_CONTROLLED_SHUTDOWN (6) or SHUTTING_DOWN (7)).

Every public coroutine returns plain data, or raises :class:`ClusterUnavailable` (no broker
answers) or :class:`~client.connection.ToolError` (the cluster answered an error).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

from client.connection import KafkaClient, ToolError, parse_bootstrap

__all__ = ["BrokerTracker", "ClusterService", "ClusterUnavailable", "ConsoleClient"]

API_VERSIONS = 18
OFFLINE_AFTER_S = 30.0
SHUTTING_DOWN_STATES = {6: "pending controlled shutdown", 7: "shutting down"}
_UNREACHABLE = ("cannot connect", "timed out", "connection closed", "no bootstrap",
                "Connection", "Broken pipe", "refused", "reset", "not in the cluster metadata")


def unreachable(e: Exception) -> bool:
    """A failure to reach a broker (as opposed to an error the broker answered)."""
    return isinstance(e, OSError) or any(s in str(e) for s in _UNREACHABLE)


class ClusterUnavailable(Exception):
    """No broker of the cluster can be reached (shown as the banner, not as a page error)."""


class BrokerTracker:
    """What the console has seen of each broker; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.known: dict[int, dict] = {}  # id -> {"host", "port", "rack"}
        self.registered: set[int] = set()  # brokers of the last full Metadata answer
        self.controller = -1
        self.failed: dict[int, tuple[float, str]] = {}  # id -> (since, error)
        self.metric_state: dict[int, tuple[float, int]] = {}  # id -> (when, BrokerState)

    def observe(self, md, full: bool = True) -> None:
        """A Metadata answer: its brokers are registered; replicas it names are known."""
        with self._lock:
            ids = set()
            for b in md.brokers:
                ids.add(b.node_id)
                self.known[b.node_id] = {"host": b.host, "port": b.port, "rack": b.rack}
            for t in getattr(md, "topics", None) or []:
                for p in t.partitions:
                    for r in p.replica_nodes:
                        self.known.setdefault(r, {"host": None, "port": None, "rack": None})
            if full:
                self.registered = ids
            self.controller = getattr(md, "controller_id", -1)

    def addresses(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(b["host"], b["port"]) for _, b in sorted(self.known.items()) if b["host"]]

    def mark_failed(self, broker_id: int, error: str) -> None:
        with self._lock:
            since = self.failed.get(broker_id, (self.clock(), ""))[0]
            self.failed[broker_id] = (since, error)

    def mark_ok(self, broker_id: int) -> None:
        with self._lock:
            self.failed.pop(broker_id, None)

    def set_metric_state(self, broker_id: int, state: int) -> None:
        with self._lock:
            self.metric_state[broker_id] = (self.clock(), state)

    def state(self, broker_id: int, fresh_s: float = 30.0) -> tuple[str, str]:
        """(state, detail) of one broker (see the module docstring)."""
        with self._lock:
            if broker_id not in self.registered:
                return "offline", "not registered in the cluster"
            failed = self.failed.get(broker_id)
            if failed is not None and (self.clock() - failed[0] >= OFFLINE_AFTER_S
                                       or "refused" in failed[1]):
                return "offline", f"not answering: {failed[1]}"
            metric = self.metric_state.get(broker_id)
            if metric and metric[1] in SHUTTING_DOWN_STATES and \
                    self.clock() - metric[0] <= fresh_s:
                return "controlled shutdown", SHUTTING_DOWN_STATES[metric[1]]
            if failed is not None:
                return "online", f"last request failed: {failed[1]}"
            return "online", ""

    def brokers(self) -> list[dict]:
        """Every known broker with its state, by id."""
        with self._lock:
            items = sorted(self.known.items())
        out = []
        for broker_id, b in items:
            state, detail = self.state(broker_id)
            out.append({"id": broker_id, **b, "state": state, "detail": detail,
                        "controller": broker_id == self.controller})
        return out


class ConsoleClient(KafkaClient):
    """A :class:`KafkaClient` that reports Metadata to the tracker and tolerates one broker
    being down (:meth:`try_node`)."""

    tracker: BrokerTracker

    @property
    def address(self) -> str:
        conn = self._conns.get(None)
        return conn.address if conn is not None else ""

    def metadata(self, topics: list[str] | None = None, auto_create: bool = False):
        md = super().metadata(topics, auto_create)
        self.tracker.observe(md, full=True)
        return md

    def try_node(self, api_key: int, body, node: int, *, version: int | None = None,
                 timeout: float | None = None):
        """``request(..., node=node)``, or ``None`` when that broker cannot be reached (it is
        then marked as failing and its connection reset)."""
        try:
            resp = self.request(api_key, body, version=version, node=node, timeout=timeout)
        except (ToolError, OSError) as e:
            if not unreachable(e):
                raise
            self.reset_connection(node)
            self.tracker.mark_failed(node, str(e))
            return None
        self.tracker.mark_ok(node)
        return resp


class ClusterService:
    """Runs ``fn(client, *args)`` on a worker thread with failover (see the module doc)."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, workers: int = 4,
                 security: dict[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.servers = parse_bootstrap(bootstrap)
        self.timeout = timeout
        self.security = security
        self.tracker = BrokerTracker()
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kafka")
        self._local = threading.local()
        self._clients: list[KafkaClient] = []
        self._lock = threading.Lock()
        self._bad: dict[str, float] = {}  # address -> when it last failed
        self.connected_to = ""

    # ----- clients ---------------------------------------------------------------------------
    def candidates(self) -> list[str]:
        """Configured servers, then the brokers seen in Metadata; recently failed ones last."""
        seen: dict[str, None] = {}
        for host, port in [*self.servers, *self.tracker.addresses()]:
            seen.setdefault(f"{host}:{port}", None)
        now = time.monotonic()
        with self._lock:
            bad = {a for a, when in self._bad.items() if now - when < 60}
        return [a for a in seen if a not in bad] + [a for a in seen if a in bad]

    def new_client(self, client_id: str = "josef-console") -> ConsoleClient:
        try:
            c = ConsoleClient(",".join(self.candidates()), client_id=client_id,
                              timeout=self.timeout, security=self.security)
        except ToolError as e:
            raise ClusterUnavailable(str(e)) from None
        c.tracker = self.tracker
        self.connected_to = c.address
        return c

    def _client(self) -> ConsoleClient:
        c = getattr(self._local, "client", None)
        if c is None:
            c = self.new_client()
            self._local.client = c
            with self._lock:
                self._clients.append(c)
        return c

    def _drop_client(self) -> None:
        c = getattr(self._local, "client", None)
        self._local.client = None
        if c is not None:
            with self._lock:
                if c.address:
                    self._bad[c.address] = time.monotonic()
                if c in self._clients:
                    self._clients.remove(c)
            c.close()

    def _call(self, fn: Callable[..., Any], *args) -> Any:
        last: Exception | None = None
        for _attempt in range(2):
            c = self._client()
            try:
                return fn(c, *args)
            except (ToolError, OSError) as e:
                if not unreachable(e):
                    raise
                self._drop_client()
                last = e
        raise ClusterUnavailable(str(last)) from None

    async def run(self, fn: Callable[..., Any], *args) -> Any:
        """``fn(client, *args)`` in a worker thread, failing over once."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._call, fn,
                                                                *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for c in self._clients:
                c.close()
            self._clients.clear()

    # ----- broker liveness ---------------------------------------------------------------------
    async def probe_brokers(self) -> list[dict]:
        """ApiVersions to every registered broker (2 s each): refreshes their states."""
        return await self.run(_probe)


def _probe(c: ConsoleClient) -> list[dict]:
    md = c.metadata([])
    for b in md.brokers:
        c.try_node(API_VERSIONS, {}, b.node_id, version=0, timeout=2.0)
    return c.tracker.brokers()
