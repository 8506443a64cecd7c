"""The loopback proxy network (the fallback without namespaces): a connection is attributed
to the node process that opened it, a cut link stalls (bytes flow again after healing), new
connections over a cut link are held, other links are untouched. No root needed."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.faults.net import CLIENT
from tests.faults.proxynet import ProxyNetwork

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ECHO = ("import socket,sys,threading\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(16); print('up', flush=True)\n"
        "def serve(c):\n"
        "    while (d := c.recv(100)):\n"
        "        c.sendall(d)\n"
        "while True:\n"
        "    c,_=s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n")
# node "a": connects when told, then echoes each stdin line through the link
NODE_A = ("import socket,sys\n"
          "port=int(sys.argv[1]); print('ready', flush=True); sys.stdin.readline()\n"
          "c=socket.create_connection(('127.0.0.1', port), timeout=1.5)\n"
          "for line in sys.stdin:\n"
          "    try:\n"
          "        c.sendall(line.strip().encode()); print(c.recv(100).decode(), flush=True)\n"
          "    except OSError as e:\n"
          "        print('stalled', type(e).__name__, flush=True)\n")


@pytest.fixture
def net():
    n = ProxyNetwork(["a", "b"])
    n.setup()
    procs = []
    try:
        b = subprocess.Popen([sys.executable, "-c", ECHO, str(n.listen_port("b", 7000))],
                             stdout=subprocess.PIPE, text=True)
        procs.append(b)
        assert b.stdout.readline().strip() == "up"
        n.node_started("b", b.pid)
        a = subprocess.Popen([sys.executable, "-c", NODE_A, str(n.port("b", 7000))],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(a)
        assert a.stdout.readline().strip() == "ready"
        n.node_started("a", a.pid)
        n.node_a = a  # type: ignore[attr-defined]
        yield n
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()
        n.teardown()


def say(a: subprocess.Popen, word: str) -> str:
    a.stdin.write(word + "\n")
    a.stdin.flush()
    return a.stdout.readline().strip()


def client_echo(n: ProxyNetwork, word: bytes) -> str:
    try:
        with socket.create_connection(("127.0.0.1", n.port("b", 7000)), timeout=1.5) as c:
            c.sendall(word)
            return c.recv(100).decode()
    except OSError as e:
        return f"stalled {type(e).__name__}"


def test_links_are_attributed_cut_and_healed(net):
    a = net.node_a
    a.stdin.write("go\n")
    a.stdin.flush()
    assert say(a, "one") == "one"
    assert {(link.src, link.dst) for link in net._links} == {("a", "b")}
    assert client_echo(net, b"c1") == "c1"
    net.cut("a", "b")
    assert say(a, "two").startswith("stalled")  # bytes wait, like dropped packets
    assert client_echo(net, b"c2") == "c2"  # the client's link is not cut
    net.heal()
    # the stalled bytes ("two") arrive now; the echo of the next line follows them
    assert say(a, "three") in ("two", "twothree")
    net.partition([[CLIENT], ["b"]])
    assert client_echo(net, b"c3").startswith("stalled")  # held, never connected
    net.heal()
    assert client_echo(net, b"c4") == "c4"
