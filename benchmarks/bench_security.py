"""Security benchmark: produce and fetch throughput over SSL against PLAINTEXT, and new
connections per second with SCRAM authentication.

One Josef broker (``python -m broker``, log dir in /dev/shm when present) with listeners
PLAINTEXT, SSL (PKCS12 keystore made here with ``cryptography``) and SASL_PLAINTEXT /
SASL_SSL (SCRAM-SHA-256). The clients are this process, the same client code for both sides
of each ratio:

1. **Produce**: confluent-kafka's producer, ``--records`` records of 1 KiB, acks=1,
   linger.ms=5, batch.size=1 MiB, over PLAINTEXT and over SSL (MB/s; aim SSL >= 0.5 x).
2. **Fetch**: confluent-kafka's consumer reading the whole partition (assign from offset 0)
   over PLAINTEXT and over SSL (MB/s; aim >= 0.5 x). Over TLS the broker copies file data
   through the TLS transport (no sendfile) and encrypts it on the event loop.
3. **Connections/s**: a blocking client opens a connection, runs ApiVersions (baseline,
   PLAINTEXT) or SaslHandshake + the SCRAM-SHA-256 exchange (SASL_PLAINTEXT, SASL_SSL),
   and closes, ``--conns`` times from 2 threads. The client's salted password is computed
   once (as a client reusing it would), so the numbers are the broker's cost.

Rounds alternate between the variants; the best round of each is kept. Writes
``benchmarks/results/security.md``. Run: ``python benchmarks/bench_security.py [--quick]
[--rounds N] [--records N] [--conns N]``. Never run from the test suite.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.integration.harness import free_port, recv_exact  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "security.md"
TOPIC = "bench-security"
USER, PASSWORD = "bench", "bench-secret"


class Broker:
    def __init__(self) -> None:
        from tests.tls_certs import make_certs

        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = Path(tempfile.mkdtemp(prefix="josef-bench-security-", dir=base))
        self.certs = make_certs(self.dir / "certs")
        self.ports = {p: free_port() for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                               "SASL_SSL")}
        listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items())
        c = self.certs
        props = self.dir / "server.properties"
        props.write_text("\n".join([
            "broker.id=0", f"listeners={listeners}", f"log.dirs={self.dir / 'data'}",
            "offsets.topic.replication.factor=1", "num.partitions=1",
            "ssl.keystore.type=PKCS12", f"ssl.keystore.location={c.server_p12}",
            f"ssl.keystore.password={c.password}", "sasl.enabled.mechanisms=SCRAM-SHA-256",
            "connections.max.idle.ms=600000", ""]))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.out = open(self.dir / "broker.out", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", str(props),
                                      "--log-dir", str(self.dir / "logs")],
                                     stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                api_versions(self.ports["PLAINTEXT"])
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("broker did not start: " + (self.dir / "broker.out").read_text())
        from client.connection import KafkaClient

        with KafkaClient(self.bootstrap("PLAINTEXT")) as kc:  # the SCRAM user
            from cli._configs_clients import _alter_scram
            _alter_scram(kc, USER, {"SCRAM-SHA-256": f"password={PASSWORD}"}, [])

    def bootstrap(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.out.close()
        if not os.environ.get("JOSEF_BENCH_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)


def _conf(b: Broker, protocol: str) -> dict:
    conf = {"bootstrap.servers": b.bootstrap(protocol), "security.protocol": protocol}
    if protocol == "SSL":
        conf["ssl.ca.location"] = str(b.certs.ca_pem)
    return conf


def produce(b: Broker, protocol: str, records: int) -> float:
    from confluent_kafka import Producer

    p = Producer({**_conf(b, protocol), "acks": 1, "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"v" * 1024
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(TOPIC, value)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise RuntimeError("records not delivered")
    return records * 1024 / (time.perf_counter() - start) / 1e6


def fetch(b: Broker, protocol: str, records: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**_conf(b, protocol), "group.id": f"bench-{time.time()}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                  "max.partition.fetch.bytes": 8388608})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got = size = 0
    start = time.perf_counter()
    while got < records:
        for m in c.consume(10000, 5.0):
            if m.error() is None:
                got += 1
                size += len(m.value())
    elapsed = time.perf_counter() - start
    c.close()
    return size / elapsed / 1e6


def _frame(api_key: int, version: int, cid: int, body: bytes, flexible: bool = False) -> bytes:
    client = b"bench"
    head = struct.pack(">hhih", api_key, version, cid, len(client)) + client
    if flexible:
        head += b"\x00"
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


def _recv(s) -> bytes:
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    return recv_exact(s, size)


def api_versions(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(_frame(18, 0, 1, b""))
        _recv(s)


class Scram:
    """SCRAM-SHA-256 client with the salted password computed once."""

    def __init__(self) -> None:
        self.salted: dict[bytes, bytes] = {}

    def exchange(self, s) -> None:
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = f"n={USER},r={nonce}"
        s.sendall(_frame(17, 1, 1, struct.pack(">h", 13) + b"SCRAM-SHA-256"))
        _recv(s)
        s.sendall(_frame(36, 1, 2, _bytes((f"n,,{first_bare}").encode())))
        resp = _recv(s)
        server_first = _auth_bytes(resp).decode()
        fields = dict(p.split("=", 1) for p in server_first.split(","))
        salt = base64.b64decode(fields["s"])
        salted = self.salted.get(salt)
        if salted is None:
            salted = self.salted[salt] = hashlib.pbkdf2_hmac(
                "sha256", PASSWORD.encode(), salt, int(fields["i"]))
        without = f"c=biws,r={fields['r']}"
        auth = f"{first_bare},{server_first},{without}".encode()
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        sig = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig, strict=True)))
        s.sendall(_frame(36, 1, 3, _bytes(f"{without},p={proof.decode()}".encode())))
        final = _recv(s)
        if struct.unpack(">h", final[4:6])[0] != 0:
            raise RuntimeError("SCRAM authentication failed")


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def _auth_bytes(resp: bytes) -> bytes:
    pos = 4 + 2  # correlation id, error code
    (n,) = struct.unpack(">h", resp[pos:pos + 2])
    pos += 2 + max(n, 0)  # error message
    (size,) = struct.unpack(">i", resp[pos:pos + 4])
    return resp[pos + 4:pos + 4 + size]


def connections(b: Broker, protocol: str, total: int, threads: int = 2) -> float:
    ctx = None
    if "SSL" in protocol:
        ctx = ssl.create_default_context(cafile=str(b.certs.ca_pem))
    scram = Scram()
    port = b.ports[protocol]
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for _ in range(n):
                raw = socket.create_connection(("127.0.0.1", port), timeout=10)
                s = ctx.wrap_socket(raw, server_hostname="localhost") if ctx else raw
                with s:
                    if protocol == "PLAINTEXT":
                        s.sendall(_frame(18, 0, 1, b""))
                        _recv(s)
                    else:
                        scram.exchange(s)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(total // threads,)) for _ in range(threads)]
    start = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return total // threads * threads / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--conns", type=int, default=0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    records = args.records or (20_000 if args.quick else 200_000)
    conns = args.conns or (100 if args.quick else 1000)
    b = Broker()
    best: dict[str, float] = {}
    try:
        for _ in range(rounds):
            for proto in ("PLAINTEXT", "SSL"):
                key = f"produce {proto}"
                best[key] = max(best.get(key, 0.0), produce(b, proto, records))
        total = records * rounds * 2
        for _ in range(rounds):
            for proto in ("PLAINTEXT", "SSL"):
                key = f"fetch {proto}"
                best[key] = max(best.get(key, 0.0), fetch(b, proto, total))
        for _ in range(rounds):
            for proto in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"):
                key = f"conns {proto}"
                best[key] = max(best.get(key, 0.0), connections(b, proto, conns))
    finally:
        b.stop()

    def ratio(a: str, base: str) -> str:
        return f"{best[a] / best[base]:.2f}"

    lines = [
        f"# Security benchmark (benchmarks/bench_security.py, {time.strftime('%Y-%m-%d')})", "",
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end; one broker subprocess on 127.0.0.1. Best of {rounds} rounds; {records} records of 1 KiB per produce round, the whole "
        f"partition ({records * rounds * 2} records) per fetch; {conns} connections per "
        "round from 2 threads (client-side SCRAM salting cached).", "",
        "| measure | PLAINTEXT | secured | ratio | aim |", "| --- | --- | --- | --- | --- |",
        f"| produce MB/s (confluent-kafka), SSL | {best['produce PLAINTEXT']:.1f} | "
        f"{best['produce SSL']:.1f} | {ratio('produce SSL', 'produce PLAINTEXT')} | >= 0.5 |",
        f"| fetch MB/s (confluent-kafka), SSL | {best['fetch PLAINTEXT']:.1f} | "
        f"{best['fetch SSL']:.1f} | {ratio('fetch SSL', 'fetch PLAINTEXT')} | >= 0.5 |",
        f"| connections/s, SCRAM-SHA-256 over SASL_PLAINTEXT (plain: ApiVersions only) | "
        f"{best['conns PLAINTEXT']:.0f} | {best['conns SASL_PLAINTEXT']:.0f} | "
        f"{ratio('conns SASL_PLAINTEXT', 'conns PLAINTEXT')} | - |",
        f"| connections/s, SCRAM-SHA-256 over SASL_SSL (TLS handshake + SCRAM) | "
        f"{best['conns PLAINTEXT']:.0f} | {best['conns SASL_SSL']:.0f} | "
        f"{ratio('conns SASL_SSL', 'conns PLAINTEXT')} | - |", ""]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
