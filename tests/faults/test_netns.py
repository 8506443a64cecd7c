"""The harness's namespace network: links really cut and healed (nftables drop, and the
blackhole-route fallback), the client side (root namespace) reaches nodes through the bridge,
and everything is removed afterwards. Needs root (CAP_NET_ADMIN); skipped otherwise."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time

import pytest

from tests.faults.net import CLIENT, NamespaceNetwork, namespaces_available, sh
from tests.faults.state import RunState

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SERVER = ("import socket,sys\n"
          "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind((sys.argv[1], 7000)); s.listen(16); print('up', flush=True)\n"
          "while True:\n"
          "    c,_=s.accept(); c.sendall(b'hi'); c.close()\n")
PROBE = ("import socket,sys\n"
         "try:\n"
         "    c=socket.create_connection((sys.argv[1], 7000), timeout=1.5); "
         "print(c.recv(2).decode())\n"
         "except OSError as e:\n"
         "    print('cut', type(e).__name__)\n")


@pytest.fixture
def network(tmp_path, request):
    why = namespaces_available()
    if why:
        pytest.skip(why)
    run_id = secrets.token_hex(3)
    state = RunState(run_id, tmp_path / "state")
    net = NamespaceNetwork(state, run_id, ["a", "b"])
    net.use_nft = net.use_nft and request.param == "nft"
    if request.param == "nft" and not net.use_nft:
        state.cleanup()
        pytest.skip("nft is not installed")
    procs: list[subprocess.Popen] = []
    try:
        net.setup()
        server = subprocess.Popen([*net.command_prefix("b"), sys.executable, "-c", SERVER,
                                   net.host("b")], stdout=subprocess.PIPE, text=True)
        procs.append(server)
        state.add_pid(server.pid)
        assert server.stdout.readline().strip() == "up"
        yield net
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
            p.stdout.close()
        state.cleanup()


def probe_from(net: NamespaceNetwork, node: str) -> str:
    if node == CLIENT:
        try:
            with socket.create_connection((net.host("b"), 7000), timeout=1.5) as c:
                return c.recv(2).decode()
        except OSError as e:
            return f"cut {type(e).__name__}"
    out = subprocess.run([*net.command_prefix(node), sys.executable, "-c", PROBE,
                          net.host("b")], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


@pytest.mark.parametrize("network", ["nft", "blackhole"], indirect=True)
def test_cut_and_heal_links(network):
    net = network
    assert probe_from(net, "a") == "hi"
    assert probe_from(net, CLIENT) == "hi"
    net.cut("a", "b")
    assert probe_from(net, "a").startswith("cut")
    assert probe_from(net, CLIENT) == "hi"  # only that link
    net.heal()
    assert probe_from(net, "a") == "hi"
    net.partition([[CLIENT, "a"], ["b"]])
    assert probe_from(net, "a").startswith("cut")
    assert probe_from(net, CLIENT).startswith("cut")
    net.heal()
    assert probe_from(net, CLIENT) == "hi"


def test_teardown_removes_namespaces_links_and_bridge(tmp_path):
    why = namespaces_available()
    if why:
        pytest.skip(why)
    run_id = secrets.token_hex(3)
    state = RunState(run_id, tmp_path / "state")
    net = NamespaceNetwork(state, run_id, ["a", "b", "zk"])
    net.setup()
    names = sh("ip", "netns", "list").stdout
    assert all(ns in names for ns in net.ns.values())
    sleeper = subprocess.Popen([*net.command_prefix("a"), "sleep", "300"])
    entered = time.monotonic() + 10  # inside the namespace before the cleanup looks
    while time.monotonic() < entered and str(sleeper.pid) not in \
            sh("ip", "netns", "pids", net.ns["a"]).stdout.split():
        time.sleep(0.05)
    state.cleanup()  # kills what runs inside, deletes namespaces, links, bridge
    sleeper.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
            ns in sh("ip", "netns", "list").stdout for ns in net.ns.values()):
        time.sleep(0.1)
    assert not any(ns in sh("ip", "netns", "list").stdout for ns in net.ns.values())
    links = sh("ip", "-o", "link", "show").stdout
    assert net.bridge not in links and f"jf{run_id}h" not in links
