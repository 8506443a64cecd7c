"""``josef console``: serve the web console for a Kafka-compatible cluster.

``josef console --bootstrap-server HOST:PORT[,HOST:PORT...] [--listen HOST:PORT]
[--allow-writes] [--basic-auth-file FILE] [--refresh-seconds S]`` serves until interrupted
(SIGINT/SIGTERM). The console fails over between the bootstrap servers and the brokers the
cluster reports. Read-only unless ``--allow-writes`` (topic create/delete/config/partitions,
produce, delete records, reset group offsets; every write logged on ``console.audit``).
``--basic-auth-file`` asks for a login (``user:hash`` lines; ``josef console
--hash-password`` prints a hash for a password read from stdin). The default listen port is
9021, clear of Spark's web UIs (8080 master, 8081 worker, 4040 driver). The cluster does not
have to be up: pages show a banner until it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import logging
import signal
import sys

from cli._common import SECURITY_PREFIXES, UsageError

COMMAND = "console"
HELP = "Serve the web console for a cluster (brokers, topics, messages, groups, charts)"
DEFAULT_LISTEN = "127.0.0.1:9021"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                   help="the cluster's brokers (several for failover)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties for secured listeners (security.protocol, ...)")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where the console listens (default {DEFAULT_LISTEN}; port 0 = any)")
    p.add_argument("--allow-writes", action="store_true",
                   help="allow changes from the console (topics, configs, partitions, "
                        "produce, delete records, reset offsets)")
    p.add_argument("--basic-auth-file", metavar="FILE",
                   help="require a login: user:hash lines (see --hash-password)")
    p.add_argument("--hash-password", action="store_true",
                   help="print a hash for --basic-auth-file from a password on stdin, and exit")
    p.add_argument("--refresh-seconds", type=float, default=5.0, metavar="S",
                   help="how often charts sample the cluster (default 5)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="request timeout towards the cluster (default 10)")


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen expects HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _security(args) -> dict[str, str] | None:
    if not args.command_config:
        return None
    from client.security import load_client_properties

    try:
        props = load_client_properties(args.command_config)
    except Exception as e:  # noqa: BLE001 - reported as one line
        raise UsageError(f"cannot read --command-config {args.command_config}: {e}") from None
    return {k: v for k, v in props.items() if k.startswith(SECURITY_PREFIXES)} or None


async def _serve(args, users, security) -> None:
    from aiohttp import web

    from console.app import make_app

    host, port = _listen(args.listen)
    app = make_app(args.bootstrap_server, allow_writes=args.allow_writes,
                   refresh_seconds=args.refresh_seconds, timeout=args.timeout, users=users,
                   security=security)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, shutdown_timeout=2.0)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1] if site._server else port
    print(f"Josef console for {args.bootstrap_server} on http://{host}:{bound}/"
          f"{'' if args.allow_writes else ' (read-only)'}"
          f"{' (login required)' if users else ''}", file=sys.stderr, flush=True)
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
    if args.hash_password:
        from console.auth import hash_password

        text = getpass.getpass("Password: ") if sys.stdin.isatty() else sys.stdin.readline()
        print(hash_password(text.rstrip("\n")))
        return 0
    if not args.bootstrap_server:
        print("josef console: --bootstrap-server is required", file=sys.stderr)
        return 2
    try:
        _listen(args.listen)
        security = _security(args)
    except (ValueError, UsageError) as e:
        print(f"josef console: {e}", file=sys.stderr)
        return 2
    users = None
    if args.basic_auth_file:
        from console.auth import AuthFileError, load_users

        try:
            users = load_users(args.basic_auth_file)
        except AuthFileError as e:
            print(f"josef console: --basic-auth-file: {e}", file=sys.stderr)
            return 2
    try:
        asyncio.run(_serve(args, users, security))
    except OSError as e:
        print(f"josef console: cannot listen on {args.listen}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
