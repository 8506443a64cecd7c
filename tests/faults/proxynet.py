"""``ProxyNetwork``: the fallback network when namespaces cannot be made (no CAP_NET_ADMIN).

Every node listens on its own loopback port, and is reached only through a TCP proxy the
harness runs (an asyncio loop in a thread of the harness): a node's advertised port and its
``zookeeper.connect`` port are proxy ports. On each accepted connection the proxy finds out
which node it comes from (the peer's socket inode in ``/proc/net/tcp``, then the node
process owning it; anything else is the ``client``), so a link between two nodes can be cut
like a partition would: the proxy stops reading both sides (bytes wait in the kernel, as
retransmitted packets would, and flow again when the link heals), and holds new connections
across a cut link without connecting them (they are closed when it heals).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading

from tests.faults.net import CLIENT, Network, free_port
from tests.faults.state import RunState

log = logging.getLogger(__name__)


def socket_inode(local_port: int, remote_port: int) -> int | None:
    """Inode of the loopback TCP socket ``127.0.0.1:local_port -> 127.0.0.1:remote_port``."""
    want_local = f"0100007F:{local_port:04X}"
    want_remote = f"0100007F:{remote_port:04X}"
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[1] == want_local and parts[2] == want_remote:
                    return int(parts[9])
    except OSError:
        return None
    return None


def owner_of(inode: int, pids: dict[str, int]) -> str | None:
    target = f"socket:[{inode}]"
    for node, pid in pids.items():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"{fd_dir}/{fd}") == target:
                    return node
    return None


class _Pipe(asyncio.Protocol):
    """One side of a proxied connection; ``peer`` is the other side's transport."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport):  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        other = self.link.other(self)
        if other is not None and other.transport is not None:
            other.transport.write(data)

    def connection_lost(self, exc):  # type: ignore[override]
        self.link.close()


class _Link:
    """A proxied connection from node ``src`` to node ``dst``."""

    def __init__(self, net: ProxyNetwork, src: str, dst: str) -> None:
        self.net, self.src, self.dst = net, src, dst
        self.down = _Pipe(self)  # towards the connecting side
        self.up: _Pipe | None = None  # towards the node
        self.closed = False

    def other(self, pipe: _Pipe) -> _Pipe | None:
        return self.up if pipe is self.down else self.down

    def set_paused(self, paused: bool) -> None:
        for pipe in (self.down, self.up):
            if pipe is not None and pipe.transport is not None and not self.closed:
                if paused:
                    pipe.transport.pause_reading()
                else:
                    pipe.transport.resume_reading()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pipe in (self.down, self.up):
            if pipe is not None and pipe.transport is not None:
                pipe.transport.close()
        self.net._links.discard(self)


class ProxyNetwork(Network):
    """Nodes on 127.0.0.1 behind per-node proxies (see the module docstring)."""

    kind = "proxy"
    supports_cuts = True

    def __init__(self, nodes: list[str], state: RunState | None = None) -> None:
        self.nodes = list(nodes)
        self.state = state
        self._ports: dict[tuple[str, int], tuple[int, int]] = {}  # -> (proxy, real)
        self.pids: dict[str, int] = {}
        self._cuts: set[frozenset[str]] = set()
        self._links: set[_Link] = set()
        self._held: set[_Link] = set()
        self._servers: list[asyncio.base_events.Server] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxynet",
                                        daemon=True)

    # ---- plumbing ------------------------------------------------------------------------------
    def setup(self) -> None:
        self._thread.start()

    def _call(self, fn, *args):
        """Run ``fn(*args)`` on the proxy loop and wait for it."""
        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def host(self, node: str) -> str:
        return "127.0.0.1"

    def port(self, node: str, service: int) -> int:
        key = (node, service)
        if key not in self._ports:
            proxy, real = free_port(), free_port()
            self._ports[key] = (proxy, real)
            fut = asyncio.run_coroutine_threadsafe(self._listen(node, proxy, real), self._loop)
            fut.result(30)
        return self._ports[key][0]

    def listen_port(self, node: str, service: int) -> int:
        self.port(node, service)
        return self._ports[(node, service)][1]

    def node_started(self, node: str, pid: int) -> None:
        self.pids[node] = pid

    async def _listen(self, dst: str, proxy_port: int, real_port: int) -> None:
        loop = asyncio.get_running_loop()

        def factory() -> _Pipe:
            link = _Link(self, "?", dst)
            link.real_port = real_port  # type: ignore[attr-defined]
            link.proxy_port = proxy_port  # type: ignore[attr-defined]
            link.down = _AcceptedPipe(link)
            return link.down

        server = await loop.create_server(factory, "127.0.0.1", proxy_port, reuse_address=True)
        self._servers.append(server)

    # ---- cuts --------------------------------------------------------------------------------------
    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self._cuts

    def cut(self, a: str, b: str) -> None:
        self._call(self._cut, a, b)

    def _cut(self, a: str, b: str) -> None:
        self._cuts.add(frozenset((a, b)))
        for link in list(self._links):
            if {link.src, link.dst} == {a, b}:
                link.set_paused(True)

    def heal(self) -> None:
        self._call(self._heal)

    def _heal(self) -> None:
        self._cuts.clear()
        for link in list(self._held):
            link.close()
        self._held.clear()
        for link in list(self._links):
            link.set_paused(False)

    def teardown(self) -> None:
        if not self._thread.is_alive():
            return

        def stop() -> None:
            for link in list(self._links) + list(self._held):
                link.close()
            for s in self._servers:
                s.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


class _AcceptedPipe(_Pipe):
    """The accepted side: identifies the source node, then connects upstream (or holds)."""

    def connection_made(self, transport):  # type: ignore[override]
        super().connection_made(transport)
        link = self.link
        net = link.net
        peer = transport.get_extra_info("peername")
        inode = socket_inode(peer[1], link.proxy_port) if peer else None  # type: ignore[attr-defined]
        link.src = (owner_of(inode, net.pids) if inode else None) or CLIENT
        net._links.add(link)
        if net.is_cut(link.src, link.dst):
            transport.pause_reading()
            net._held.add(link)
            return
        transport.pause_reading()  # until the node side is connected
        asyncio.get_running_loop().create_task(self._connect_up())

    async def _connect_up(self) -> None:
        link = self.link
        loop = asyncio.get_running_loop()
        try:
            up = _Pipe(link)
            await loop.create_connection(lambda: up, "127.0.0.1",
                                         link.real_port)  # type: ignore[attr-defined]
            link.up = up
        except OSError as e:
            log.info("proxy %s -> %s: %r", link.src, link.dst, e)
            link.close()
            return
        if link.closed:
            up.transport.close()  # type: ignore[union-attr]
            return
        link.set_paused(link.net.is_cut(link.src, link.dst))
