"""The network the harness runs its nodes in, and how it cuts links.

* ``NamespaceNetwork`` (as root, with iproute2): one network namespace per node (ZooKeeper,
  each broker), each with a veth pair whose other end hangs on a bridge the harness creates in
  the root namespace; the bridge has the subnet's first address and is where the clients (the
  harness process) come from. The subnet (``10.213.X.0/24``, X free on this machine) has no
  route out and forwarding is not touched, so no traffic leaves it. Links are cut inside the
  namespaces: with nftables (``nft``, packets dropped silently, as a real partition) or, when
  nft is missing, with blackhole routes (senders get an error at once). Each node's processes
  start under ``ip netns exec`` (the PID is the process's own) and listen on fixed ports of
  their own address.
* ``LoopbackNetwork``: everything on 127.0.0.1 with free ports; no cuts (single-broker runs,
  which only kill and pause).
* ``tests.faults.proxynet.ProxyNetwork``: the fallback when namespaces cannot be made (see
  there).

Every name made is recorded in the run's ``RunState`` first, so a crashed harness's leftovers
are removed by the next run (``tests.faults.state.sweep``).
"""

from __future__ import annotations

import ipaddress
import logging
import random
import shutil
import socket
import subprocess
from collections.abc import Iterable

from tests.faults.state import RunState

log = logging.getLogger(__name__)

CLIENT = "client"  # the harness process's end of every link


class NetworkError(RuntimeError):
    pass


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Network:
    """Addresses of nodes and link cuts. ``nodes`` are names ("zk", "b1", ...)."""

    kind = "none"
    supports_cuts = False

    def setup(self) -> None: ...

    def host(self, node: str) -> str:
        raise NotImplementedError

    def port(self, node: str, service: int) -> int:
        """The port ``node`` listens on for ``service`` (a default port number)."""
        return service

    def listen_port(self, node: str, service: int) -> int:
        """The port the process itself binds (differs from ``port`` behind a proxy)."""
        return self.port(node, service)

    def connect_address(self, src: str, dst: str, service: int) -> tuple[str, int]:
        """Where ``src`` reaches ``dst``'s ``service``."""
        return self.host(dst), self.port(dst, service)

    def command_prefix(self, node: str) -> list[str]:
        return []

    def node_started(self, node: str, pid: int) -> None:
        """``node``'s process is ``pid`` (the proxy network tells connections apart by it)."""

    def cut(self, a: str, b: str) -> None:
        raise NetworkError(f"{self.kind} network cannot cut links")

    def heal(self) -> None: ...

    def teardown(self) -> None: ...

    def partition(self, groups: Iterable[Iterable[str]]) -> list[tuple[str, str]]:
        """Cut every link between nodes of different groups; returns the links cut."""
        groups = [list(g) for g in groups]
        cuts = []
        for i, g in enumerate(groups):
            for h in groups[i + 1:]:
                for a in g:
                    for b in h:
                        self.cut(a, b)
                        cuts.append((a, b))
        return cuts


class LoopbackNetwork(Network):
    """All nodes on 127.0.0.1, each service on a free port; no cuts."""

    kind = "loopback"

    def __init__(self) -> None:
        self._ports: dict[tuple[str, int], int] = {}

    def host(self, node: str) -> str:
        return "127.0.0.1"

    def port(self, node: str, service: int) -> int:
        key = (node, service)
        if key not in self._ports:
            self._ports[key] = free_port()
        return self._ports[key]


def namespaces_available() -> str | None:
    """None when this process can make namespaces, veth pairs and bridges; else why not."""
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    probe = f"jfprobe{random.randrange(16**6):06x}"
    try:
        sh("ip", "netns", "add", probe)
    except (NetworkError, OSError) as e:
        return f"cannot create a network namespace: {e}"
    try:
        sh("ip", "link", "add", probe[:15], "type", "veth", "peer", "name", "p" + probe[:14],
           "netns", probe)
        sh("ip", "link", "del", probe[:15])
        sh("ip", "link", "add", "b" + probe[:14], "type", "bridge")
        sh("ip", "link", "del", "b" + probe[:14])
    except (NetworkError, OSError) as e:
        return f"cannot create veth pairs or bridges: {e}"
    finally:
        sh("ip", "netns", "del", probe, check=False)
    return None


def _used_subnets() -> set[ipaddress.IPv4Network]:
    out = sh("ip", "-4", "-o", "addr", "show", check=False).stdout
    nets = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.add(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    for line in sh("ip", "-4", "route", "show", check=False).stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first[:1].isdigit():
            nets.add(ipaddress.ip_network(first, strict=False))
    return nets


class NamespaceNetwork(Network):
    """One namespace per node on a bridge of the harness's own (see the module docstring)."""

    kind = "netns"
    supports_cuts = True

    def __init__(self, state: RunState, run_id: str, nodes: list[str],
                 rng: random.Random | None = None) -> None:
        self.state = state
        self.run_id = run_id
        self.nodes = list(nodes)
        self.rng = rng or random.Random()
        self.bridge = f"jfb{run_id}"[:15]
        self.ns = {n: f"jf-{run_id}-{n}" for n in self.nodes}
        self.addr: dict[str, str] = {}
        self.use_nft = shutil.which("nft") is not None
        self._cuts: set[tuple[str, str]] = set()

    # ---- setup -----------------------------------------------------------------------------
    def _pick_subnet(self) -> ipaddress.IPv4Network:
        used = _used_subnets()
        for _ in range(200):
            net = ipaddress.ip_network(f"10.213.{self.rng.randrange(256)}.0/24")
            if not any(net.overlaps(u) for u in used):
                return net
        raise NetworkError("no free 10.213.X.0/24 subnet")

    def setup(self) -> None:
        net = self._pick_subnet()
        hosts = list(net.hosts())
        self.prefixlen = net.prefixlen
        self.addr[CLIENT] = str(hosts[0])
        self.state.set_bridge(self.bridge)
        sh("ip", "link", "add", "name", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.addr[CLIENT]}/{net.prefixlen}", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, node in enumerate(self.nodes):
            ns = self.ns[node]
            host_end, ns_end = f"jf{self.run_id}h{i}"[:15], f"jf{self.run_id}n{i}"[:15]
            self.addr[node] = str(hosts[9 + i])
            self.state.add("netns", ns)
            self.state.add("links", host_end)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end,
               "netns", ns)
            sh("ip", "link", "set", host_end, "master", self.bridge)
            sh("ip", "link", "set", host_end, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr[node]}/{net.prefixlen}", "dev",
               ns_end)
            sh("ip", "-n", ns, "link", "set", ns_end, "up")
            if self.use_nft:
                self._nft(node, "add table inet jfaults\n"
                          "add chain inet jfaults in { type filter hook input priority 0; }\n"
                          "add chain inet jfaults out { type filter hook output priority 0; }\n")
        log.info("network: namespaces on %s (bridge %s, cuts with %s)", net, self.bridge,
                 "nftables" if self.use_nft else "blackhole routes")

    def _nft(self, node: str, script: str) -> None:
        proc = subprocess.run(["ip", "netns", "exec", self.ns[node], "nft", "-f", "-"],
                              input=script, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise NetworkError(f"nft in {self.ns[node]}: {proc.stderr.strip()}")

    # ---- addresses ---------------------------------------------------------------------------
    def host(self, node: str) -> str:
        return self.addr[node]

    def command_prefix(self, node: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[node]]

    # ---- cuts --------------------------------------------------------------------------------
    def _drop(self, node: str, peer: str) -> None:
        ip = self.addr[peer]
        if self.use_nft:
            self._nft(node, f"add rule inet jfaults in ip saddr {ip} drop\n"
                            f"add rule inet jfaults out ip daddr {ip} drop\n")
        else:
            sh("ip", "-n", self.ns[node], "route", "add", "blackhole", f"{ip}/32")

    def cut(self, a: str, b: str) -> None:
        """Drop every packet between ``a`` and ``b`` (either may be ``CLIENT``)."""
        key = tuple(sorted((a, b)))
        if key in self._cuts or a == b:
            return
        self._cuts.add(key)  # type: ignore[arg-type]
        for node, peer in ((a, b), (b, a)):
            if node != CLIENT:
                self._drop(node, peer)

    def heal(self) -> None:
        for node in self.nodes:
            if self.use_nft:
                self._nft(node, "flush chain inet jfaults in\nflush chain inet jfaults out\n")
            else:
                for a, b in self._cuts:
                    for n, peer in ((a, b), (b, a)):
                        if n == node:
                            sh("ip", "-n", self.ns[n], "route", "del", "blackhole",
                               f"{self.addr[peer]}/32", check=False)
        self._cuts.clear()

    @property
    def cuts(self) -> set[tuple[str, str]]:
        return set(self._cuts)

    def teardown(self) -> None:
        from tests.faults.state import remove_network
        remove_network({"netns": list(self.ns.values()),
                        "links": [f"jf{self.run_id}h{i}"[:15] for i in range(len(self.nodes))],
                        "bridge": self.bridge})
        self.state.set_bridge(None)
