"""The ``josef`` command line: ``josef server CONFIG [...]`` and pluggable tool sub-commands.

Sub-commands come from a registry: the built-in ``server`` command, plus every module under
:mod:`cli` that defines the tool contract (see ``cli/__init__.py``)::

    COMMAND = "topics"                  # sub-command name
    HELP = "Create, list, describe ..." # one line for ``josef --help``
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...   # exit code

``josef server`` behaves like ``kafka-server-start.sh``: it reads the properties file,
applies ``--override key=value`` entries, configures logging in Kafka's layout
(``[2024-05-01 12:00:00,123] INFO message (logger)``) and runs
``broker.server.run_server(config)`` until it returns (the server handles SIGTERM/SIGINT and
shuts down cleanly). ``--daemon`` detaches first (double fork + ``setsid``, stdin from
``/dev/null``, stdout/stderr appended to the log file, a pid file), as ``-daemon`` does, but
returns only once the broker has registered and accepts connections (exit 0), or with the
broker's last error (exit 1). A log file, pid file or operational logs directory that cannot
be written stops the command with one line naming the path and the option that moves it.

Exit codes: 0 clean shutdown; 1 the server failed; 2 bad usage or invalid configuration
(the message names the key, the value and what is allowed); 130 interrupted before the
server installed its own signal handlers.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.config import KafkaConfig
from common.config_error import ConfigError

__all__ = ["main", "Command", "discover_commands", "setup_logging", "KAFKA_LOG_FORMAT"]

#: Kafka's log4j layout ``[%d] %p %m (%c)%n``; Python's default asctime is ``%Y-%m-%d %H:%M:%S,mmm``.
KAFKA_LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

log = logging.getLogger("broker.cli")


@dataclass(frozen=True)
class Command:
    """One ``josef`` sub-command."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def setup_logging(level: str = "INFO", log_file: str | None = None) -> None:
    """Route the root logger to stderr (or ``log_file``, appended) in Kafka's layout."""
    handler: logging.Handler
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        handler = logging.FileHandler(log_file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(KAFKA_LOG_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


# ----- josef server ----------------------------------------------------------------------------

def _server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="server.properties file (Java properties syntax)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a config key, overriding the file (repeatable)")
    p.add_argument("--daemon", action="store_true",
                   help="detach from the terminal (double fork, setsid), like -daemon")
    p.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                   help="with --daemon: how long to wait for the broker to finish startup "
                        "(registered, accepting connections) before giving up (default 120)")
    p.add_argument("--pid-file", metavar="PATH",
                   help="write the server's pid here (default with --daemon: "
                        "logs/josef-server.pid)")
    p.add_argument("--log-file", metavar="PATH",
                   help="append logs here (default with --daemon: logs/josef-server.out)")
    p.add_argument("--log-level", default=os.environ.get("JOSEF_LOG_LEVEL", "INFO"),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="root log level (default INFO, or $JOSEF_LOG_LEVEL)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="where Kafka's operational logs go (kafka-request.log, controller.log, "
                        "state-change.log, log-cleaner.log, kafka-authorizer.log); default "
                        "$LOG_DIR, else the --log-file's directory, else ./logs")
    p.add_argument("--logger", action="append", default=[], metavar="NAME=LEVEL",
                   help="set one logger's level, e.g. kafka.request.logger=DEBUG to log every "
                        "request (repeatable; levels TRACE, DEBUG, INFO, WARN, ERROR)")
    p.add_argument("--log-max-bytes", type=int, default=100 * 1024 * 1024, metavar="BYTES",
                   help="rotate each operational log at this size (default 100 MiB)")
    p.add_argument("--log-backups", type=int, default=10, metavar="N",
                   help="rotated files kept per operational log (default 10)")


def _run_server(args: argparse.Namespace) -> int:
    from broker import daemon  # small, stdlib only

    if args.daemon:
        args.log_file = args.log_file or os.path.join("logs", "josef-server.out")
        args.pid_file = args.pid_file or os.path.join("logs", "josef-server.pid")
    config_path = os.path.abspath(args.config)
    # Validate in the foreground so that mistakes reach the terminal and the exit code.
    try:
        setup_logging(args.log_level, None if args.daemon else args.log_file)
    except OSError as e:
        return _unwritable("the log file", args.log_file, e, "--log-file")
    try:
        levels = _logger_levels(args.logger)
    except ValueError as e:
        print(f"josef: --logger: {e}", file=sys.stderr)
        return EXIT_USAGE
    log_dir = os.path.abspath(args.log_dir or os.environ.get("LOG_DIR") or (
        os.path.dirname(os.path.abspath(args.log_file)) if args.log_file else "logs"))
    try:
        config = KafkaConfig.from_file(config_path, args.override)
    except ConfigError as e:
        print(f"josef: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.pid_file:
        running = daemon.running_pid(args.pid_file)
        if running is not None:
            print(f"josef: a server is already running with pid {running} "
                  f"(pid file {args.pid_file})", file=sys.stderr)
            return EXIT_FAILURE
    from broker.oplogs import setup_operational_logs

    try:  # handlers open their files lazily, so they survive the fork below
        setup_operational_logs(log_dir, levels, args.log_max_bytes, args.log_backups)
    except OSError as e:
        return _unwritable("the operational logs directory", log_dir, e, "--log-dir or $LOG_DIR")
    pipe = None
    if args.daemon:
        try:
            result = daemon.daemonize(args.log_file, args.pid_file, args.wait)
        except OSError as e:
            return _unwritable("the log file", os.path.abspath(args.log_file), e, "--log-file")
        if isinstance(result, int):
            return result  # the original process: the daemon started, or failed
        pipe = result
        setup_logging(args.log_level, None)  # stderr now is the log file
        pipe.watch_errors()
    elif args.pid_file:
        try:
            daemon.write_pid_file(args.pid_file)
        except OSError as e:
            return _unwritable("the pid file", args.pid_file, e, "--pid-file")
    code: object = EXIT_FAILURE
    try:
        code = _serve(config, None if pipe is None else (
            lambda server: pipe.ready(server.broker_id, [
                str(ep) for ep in server.socket_server.bound_endpoints])))
        return code
    except SystemExit as e:
        code = e.code
        raise
    finally:
        if pipe is not None:
            pipe.finish(code)
        if args.pid_file:
            daemon.remove_pid_file(args.pid_file)


def _unwritable(what: str, path: str, e: OSError, option: str) -> int:
    """One line for a location the server cannot write, naming the option that moves it."""
    print(f"josef: cannot write {what} {path}: {e.strerror or e} (choose another place "
          f"with {option})", file=sys.stderr)
    return EXIT_FAILURE


def _logger_levels(items: list[str]) -> dict[str, int]:
    from broker.oplogs import parse_level

    out = {}
    for item in items:
        name, eq, level = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"expected NAME=LEVEL, got {item!r}")
        out[name.strip()] = parse_level(level)
    return out


def _raise_open_files_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as the JVM running Kafka does (HotSpot's
    MaxFDLimit), and log both: segment files and connections need descriptors (the log keeps
    at most one per segment, bounded by ``storage.descriptor_cache``, sized from this
    limit at startup)."""
    try:
        import resource

        def show(n: int) -> str:
            return "unlimited" if n == resource.RLIM_INFINITY else str(n)

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard and soft != resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log.info("open files limit (RLIMIT_NOFILE): soft %s raised to the hard limit %s",
                     show(soft), show(hard))
        else:
            log.info("open files limit (RLIMIT_NOFILE): soft %s, hard %s", show(soft), show(hard))
    except (ImportError, ValueError, OSError) as e:  # not POSIX, or refused
        log.warning("could not raise the open files limit: %s", e)


def _serve(config: KafkaConfig, on_started: Callable[..., None] | None = None) -> int:
    try:
        from broker.server import run_server
    except ImportError as e:
        log.error("The broker server is not available in this build: %s", e)
        return EXIT_FAILURE
    _raise_open_files_limit()
    try:
        asyncio.run(run_server(config, on_started))
    except KeyboardInterrupt:
        log.info("Interrupted")
        return EXIT_INTERRUPTED
    except ConfigError as e:
        log.error("%s", e)
        return EXIT_USAGE
    except Exception:
        log.exception("Fatal error during broker startup or run; shutting down")
        return EXIT_FAILURE
    return EXIT_OK


SERVER_COMMAND = Command("server", "Run a broker on a server.properties file",
                         _server_arguments, _run_server)


# ----- registry ---------------------------------------------------------------------------------

def discover_commands() -> dict[str, Command]:
    """The built-in commands plus every tool module under :mod:`cli`.

    A tool module that fails to import, or lacks the contract, is reported on stderr and
    skipped, so one broken tool never stops ``josef server``.
    """
    commands = {SERVER_COMMAND.name: SERVER_COMMAND}
    try:
        import cli as tools_pkg
    except ImportError:
        return commands
    for info in sorted(pkgutil.iter_modules(tools_pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            mod = importlib.import_module(f"cli.{info.name}")
            cmd = Command(mod.COMMAND, mod.HELP, mod.add_arguments, mod.run)
        except Exception as e:  # noqa: BLE001 - a tool's bug must not break the CLI
            print(f"josef: ignoring tool module cli.{info.name}: {e!r}",
                  file=sys.stderr)
            continue
        if cmd.name in commands:
            print(f"josef: ignoring duplicate command {cmd.name!r} from "
                  f"cli.{info.name}", file=sys.stderr)
            continue
        commands[cmd.name] = cmd
    return commands


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="josef", description="Josef: a Kafka-compatible broker written in Python.")
    parser.add_argument("--version", action="version", version=f"josef {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for cmd in commands.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(p)
        p.set_defaults(_command=cmd, _parser=p)
    return parser


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("josef")
    except Exception:  # noqa: BLE001 - not installed (running from a checkout)
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``josef`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # `josef server` / `python -m broker` use no tool module: importing every one of them
    # was ~0.4 s of each broker start (issue 22's restart profile)
    commands = {SERVER_COMMAND.name: SERVER_COMMAND} if argv[:1] == [SERVER_COMMAND.name] \
        else discover_commands()
    parser = build_parser(commands)
    args, extra = parser.parse_known_args(argv)
    if extra:  # the sub-command's own usage names what it takes (exit code 2)
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args._command.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
