"""A stand-in broker for testing the harness itself: answers every request with ApiVersions v0.

Usage: ``python fake_broker.py server.properties [--fail-bind-once MARKER]``. Reads the port
from ``listeners`` (0 = any), logs the bound port as Kafka's Acceptor does, exits 0 on SIGTERM. With ``--fail-bind-once MARKER`` it
prints an "Address already in use" error and exits 1 if MARKER does not exist yet (creating it).
"""

import asyncio
import signal
import struct
import sys


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            frame = await reader.readexactly(size)
            correlation_id = struct.unpack_from(">i", frame, 4)[0]
            body = struct.pack(">ihi", correlation_id, 0, 1) + struct.pack(">hhh", 18, 0, 3)
            writer.write(struct.pack(">i", len(body)) + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> int:
    props = dict(line.split("=", 1) for line in open(sys.argv[1]).read().splitlines()
                 if "=" in line and not line.startswith("#"))
    if "--fail-bind-once" in sys.argv:
        import os

        marker = sys.argv[sys.argv.index("--fail-bind-once") + 1]
        if not os.path.exists(marker):
            open(marker, "w").close()
            print("ERROR [Errno 98] Address already in use", flush=True)
            return 1
    port = int(props["listeners"].rsplit(":", 1)[1])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    print(f"started; Awaiting socket connections on 127.0.0.1:{bound}.", flush=True)
    async with server:
        await stop.wait()
    print("stopped cleanly", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
