"""``josef console``: serve the web console for a Kafka-compatible cluster.

``josef console --bootstrap-server HOST:PORT [--listen HOST:PORT] [--allow-writes]
[--refresh-seconds S]`` serves until interrupted (SIGINT/SIGTERM). Read-only unless
``--allow-writes`` (topic create/delete). The cluster does not have to be up: pages show a
banner until it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from cli._common import add_bootstrap

COMMAND = "console"
HELP = "Serve the web console for a cluster (brokers, topics, messages, groups, charts)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="where the console listens (default 127.0.0.1:8080; port 0 = any)")
    p.add_argument("--allow-writes", action="store_true",
                   help="allow creating and deleting topics from the console")
    p.add_argument("--refresh-seconds", type=float, default=5.0, metavar="S",
                   help="how often charts sample the cluster (default 5)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="request timeout towards the cluster (default 10)")


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen expects HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


async def _serve(args) -> None:
    from aiohttp import web

    from console.app import make_app

    host, port = _listen(args.listen)
    app = make_app(args.bootstrap_server, allow_writes=args.allow_writes,
                   refresh_seconds=args.refresh_seconds, timeout=args.timeout)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1] if site._server else port
    print(f"Josef console for {args.bootstrap_server} on http://{host}:{bound}/"
          f"{'' if args.allow_writes else ' (read-only)'}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING,
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    try:
        _listen(args.listen)
    except ValueError as e:
        print(f"josef console: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args))
    except OSError as e:
        print(f"josef console: cannot listen on {args.listen}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
