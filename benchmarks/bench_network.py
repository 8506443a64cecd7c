"""Network layer benchmark: the Processor against simpler asyncio servers, same run.

Workloads (client in a separate process, blocking sockets, 127.0.0.1):

* produce-like: 1 MiB request frames pipelined on one connection (5 in flight); the server
  appends each frame body to a file and answers with 8 bytes. Servers: a ceiling asyncio
  ``Protocol`` that parses the frames itself and appends them; asyncio streams
  (``readexactly``); the ``SocketServer`` with ``Processor`` (BufferedProtocol) and with
  ``DataReceivedProcessor``; the handler appends ``request.frame`` to a file.
* small requests: 108-byte requests, 5 in flight, echo-style 8-byte responses: round trips/s.
* fetch-like: small requests answered with a 1 MiB file slice: ``loop.sendfile`` against the
  ``os.pread`` fallback.

Run: ``python benchmarks/bench_network.py [--quick]``. Prints a markdown table and writes it to
``benchmarks/results/network.md``. Ratios are only meaningful within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.network import (  # noqa: E402
    DataReceivedProcessor,
    Endpoint,
    Processor,
    SocketServer,
)
from broker.request_channel import FileSlice, Response  # noqa: E402

MiB = 1024 * 1024
RESPONSE = struct.pack(">ii", 4, 0)  # size 4 + correlation id 0 (small responses)


# ---- client (runs in a child process) ---------------------------------------------------------
def run_client(port: int, body_size: int, count: int, inflight: int) -> dict:
    """Send ``count`` frames of ``body_size`` bytes with ``inflight`` outstanding; time it."""
    frame = struct.pack(">ihhi", 8 + body_size, 0, 0, 0) + b"x" * body_size
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    scratch = bytearray(MiB)
    mv = memoryview(scratch)
    head = bytearray()
    remaining_body = -1  # -1: reading a size prefix
    sent = got = received_bytes = 0
    t0 = time.perf_counter()
    while sent < min(inflight, count):
        sock.sendall(frame)
        sent += 1
    while got < count:
        n = sock.recv_into(mv)
        if not n:
            raise ConnectionError(f"server closed after {got} responses")
        received_bytes += n
        i = 0
        while i < n:
            if remaining_body < 0:
                take = min(4 - len(head), n - i)
                head += mv[i:i + take]
                i += take
                if len(head) == 4:
                    remaining_body = int.from_bytes(head, "big")
                    head.clear()
            if remaining_body >= 0:
                take = min(remaining_body, n - i)
                remaining_body -= take
                i += take
                if remaining_body == 0:
                    remaining_body = -1
                    got += 1
                    if sent < count:
                        sock.sendall(frame)
                        sent += 1
    elapsed = time.perf_counter() - t0
    sock.close()
    return {"elapsed": elapsed, "count": count, "sent_bytes": len(frame) * count,
            "received_bytes": received_bytes}


async def drive(port: int, body_size: int, count: int, inflight: int = 5) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", str(port), str(body_size), str(count),
        str(inflight), stdout=subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"client failed with {proc.returncode}")
    return json.loads(out)


# ---- comparison servers -------------------------------------------------------------------------
class CeilingProtocol(asyncio.Protocol):
    """The least a data_received Protocol can do: parse size prefixes and stream each body
    straight to the file as it arrives (no frame buffering, no request objects)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.head = bytearray()
        self.remaining = -1  # body bytes still to come; -1 while reading a size prefix

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        mv = memoryview(data)
        i, n = 0, len(mv)
        while i < n:
            if self.remaining < 0:
                take = min(4 - len(self.head), n - i)
                self.head += mv[i:i + take]
                i += take
                if len(self.head) < 4:
                    return
                self.remaining = int.from_bytes(self.head, "big")
                self.head.clear()
            take = min(self.remaining, n - i)
            if take:
                os.write(self.fd, mv[i:i + take])
            i += take
            self.remaining -= take
            if self.remaining == 0:
                self.remaining = -1
                self.transport.write(RESPONSE)


async def start_ceiling(fd: int):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: CeilingProtocol(fd), "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def start_streams(fd: int):
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                body = await reader.readexactly(size)
                os.write(fd, body)
                writer.write(RESPONSE)
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def start_socket_server(handler, processor_class, **kw):
    server = SocketServer([Endpoint("PLAINTEXT", "127.0.0.1", 0)], handler, **kw)
    server.processor_class = processor_class
    await server.start()
    return server, server.port()


# ---- workloads ----------------------------------------------------------------------------------
class Best:
    """Best wall-clock rate and lowest server CPU per unit over the rounds."""

    def __init__(self) -> None:
        self.rate = 0.0  # units per second, wall clock
        self.cpu = float("inf")  # server process CPU seconds per unit

    def add(self, units: float, result: dict, cpu_s: float) -> None:
        self.rate = max(self.rate, units / result["elapsed"])
        self.cpu = min(self.cpu, cpu_s / units)


async def timed(port: int, body_size: int, count: int) -> tuple[dict, float]:
    """Drive the server; also return the CPU seconds this (server) process spent."""
    cpu0 = time.process_time()
    result = await drive(port, body_size, count)
    return result, time.process_time() - cpu0


Row = tuple[str, Best, Best, str, str]  # workload, best, baseline best, unit, baseline name


async def bench_appends(tmp: Path, frames: int, small: int, rounds: int) -> list[Row]:
    path = tmp / "append.log"

    def open_log() -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)

    async def append_handler(request):
        os.write(fd, request.frame)
        return Response(struct.pack(">i", request.correlation_id))

    variants = [
        ("ceiling: asyncio Protocol, own frame parsing", lambda: start_ceiling(fd)),
        ("asyncio streams (readexactly)", lambda: start_streams(fd)),
        ("SocketServer + Processor (BufferedProtocol)",
         lambda: start_socket_server(append_handler, Processor)),
        ("SocketServer + DataReceivedProcessor",
         lambda: start_socket_server(append_handler, DataReceivedProcessor)),
    ]
    big = {name: Best() for name, _ in variants}
    tiny = {name: Best() for name, _ in variants}
    for _ in range(rounds):  # round-robin, best of rounds: the machine is shared
        for name, start in variants:
            fd = open_log()
            server, port = await start()
            try:
                await drive(port, 8, 200)  # warm-up
                r, cpu = await timed(port, MiB - 8, frames)
                big[name].add(r["sent_bytes"] / MiB, r, cpu)
                r, cpu = await timed(port, 100, small)
                tiny[name].add(r["count"], r, cpu)
            finally:
                if isinstance(server, SocketServer):
                    await server.stop()
                else:
                    server.close()
                    await server.wait_closed()
                os.close(fd)
    ceiling = variants[0][0]
    rows: list[Row] = []
    for name, _ in variants:
        rows.append((f"1 MiB produce frames, 5 in flight, append to file: {name}", big[name],
                     big[ceiling], "MB", "ceiling"))
    for name, _ in variants:
        rows.append((f"108-byte requests, 5 in flight: {name}", tiny[name], tiny[ceiling],
                     "req", "ceiling"))
    path.unlink(missing_ok=True)
    return rows


async def bench_fetch(tmp: Path, count: int, rounds: int) -> list[Row]:
    path = tmp / "segment.log"
    file_size = 64 * MiB
    with open(path, "wb") as f:
        for _ in range(file_size // MiB):
            f.write(os.urandom(MiB))
    fd = os.open(path, os.O_RDONLY)
    position = [0]

    async def fetch_handler(request):
        pos = position[0]
        position[0] = (pos + MiB) % file_size
        return Response([struct.pack(">i", request.correlation_id), FileSlice(fd, pos, MiB)])

    modes = [("os.sendfile straight to the socket", True), ("os.pread fallback", False)]
    best = {name: Best() for name, _ in modes}
    try:
        for _ in range(rounds):
            for name, use_sendfile in modes:
                server, port = await start_socket_server(fetch_handler, Processor,
                                                         use_sendfile=use_sendfile)
                try:
                    await drive(port, 8, 20)
                    r, cpu = await timed(port, 8, count)
                finally:
                    await server.stop()
                best[name].add(r["received_bytes"] / MiB, r, cpu)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    base = modes[1][0]
    return [(f"1 MiB file-slice responses, 5 in flight: {name}", best[name], best[base], "MB",
             "pread") for name, _ in modes]


def render(rows: list[Row]) -> list[str]:
    lines = ["| workload | result | ratio | server CPU | CPU ratio | vs |",
             "| --- | --- | --- | --- | --- | --- |"]
    for workload, b, base, unit, base_name in rows:
        rate = f"{b.rate:.0f} {'MB/s' if unit == 'MB' else 'req/s'}"
        cpu = f"{b.cpu * 1e6:.0f} us/{unit}"
        lines.append(f"| {workload} | {rate} | {b.rate / base.rate:.2f} | {cpu} | "
                     f"{b.cpu / base.cpu:.2f} | {base_name} |")
    return lines


async def main_async(args) -> str:
    load_before = os.getloadavg()[0]
    base_dir = args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    with tempfile.TemporaryDirectory(prefix="bench-network-", dir=base_dir) as d:
        tmp = Path(d)
        rows = await bench_appends(tmp, args.frames, args.small, args.rounds)
        rows += await bench_fetch(tmp, args.fetches, args.rounds)
    lines = [
        "# Network layer benchmark (benchmarks/bench_network.py)",
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, loopback, client in a "
        f"separate process; {args.frames} x 1 MiB frames, {args.small} small requests, "
        f"{args.fetches} x 1 MiB fetch responses; best of {args.rounds} round-robin rounds; "
        f"files under {base_dir or tempfile.gettempdir()}. Ratios are within this run; "
        "result = wall-clock rate (ratio > 1 is faster), server CPU = CPU time of the server "
        "process per unit (CPU ratio < 1 is cheaper; steadier than wall clock on a busy "
        f"machine). 1-minute load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after (other work on the machine inflates wall times).",
        "",
    ]
    lines += render(rows)
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        port, body, count, inflight = map(int, sys.argv[2:6])
        print(json.dumps(run_client(port, body, count, inflight)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--frames", type=int, default=1024, help="1 MiB frames per server")
    parser.add_argument("--small", type=int, default=50_000, help="small requests per server")
    parser.add_argument("--fetches", type=int, default=2048, help="1 MiB fetch responses")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (best is reported)")
    parser.add_argument("--dir", help="directory for the files (default /dev/shm if present)")
    args = parser.parse_args()
    if args.quick:
        args.frames, args.small, args.fetches, args.rounds = 64, 2000, 64, 1
    table = asyncio.run(main_async(args))
    print(table)
    out = ROOT / "benchmarks" / "results" / "network.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)


if __name__ == "__main__":
    main()
