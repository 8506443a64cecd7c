"""Kafka's operational log files, next to the server log, in Kafka's log4j layout
(``[%d] %p %m (%c)%n``), each rotating by size.

===================== ========================================== ================ =========
file                  loggers (use these names)                  default level    also in
                                                                                  server log
===================== ========================================== ================ =========
kafka-request.log     ``kafka.request.logger``                   WARN             no
controller.log        ``kafka.controller`` (+ our ``controller``  TRACE            no (yes
                      package)                                                    for ours)
state-change.log      ``state.change.logger``                    INFO             no
log-cleaner.log       ``kafka.log.LogCleaner`` (+ ``storage.      INFO             no (yes
                      cleaner``)                                                  for ours)
kafka-authorizer.log  ``kafka.authorizer.logger``                INFO             no
===================== ========================================== ================ =========

Kafka's names do not propagate to the root logger (log4j ``additivity=false``), as in
Kafka's ``config/log4j.properties``; our own package loggers keep going to the server log as
well. ``josef server --logger kafka.request.logger=DEBUG`` turns on the request log: one
``Completed request:{json}`` line per request with its header, request and response (record
data as ``recordsSizeInBytes``) and timings (``totalTimeMs``, ``requestQueueTimeMs``,
``localTimeMs``, ``remoteTimeMs``, ``throttleTimeMs``, ``responseQueueTimeMs``,
``sendTimeMs``), as Kafka's ``RequestChannel`` writes it. ``TRACE`` (level 5) is a level name
here too.
"""

from __future__ import annotations

import base64
import json
import logging
import logging.handlers
import os
import re
import tempfile
import uuid
import weakref
from collections.abc import Iterable, Mapping

from protocol.codegen import in_range

__all__ = ["OPERATIONAL_LOGS", "TRACE", "attach_request_log", "check_writable_dir",
           "request_json", "setup_operational_logs"]

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

KAFKA_LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"

#: file -> (Kafka's logger names (not propagated), our loggers (propagated), default level)
OPERATIONAL_LOGS: dict[str, tuple[tuple[str, ...], tuple[str, ...], int]] = {
    "kafka-request.log": (("kafka.request.logger",), (), logging.WARNING),
    "controller.log": (("kafka.controller",), ("controller",), TRACE),
    "state-change.log": (("state.change.logger",), (), logging.INFO),
    "log-cleaner.log": (("kafka.log.LogCleaner",), ("storage.cleaner",), logging.INFO),
    "kafka-authorizer.log": (("kafka.authorizer.logger",), (), logging.INFO),
}
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_BACKUPS = 10

_installed: list[tuple[logging.Logger, logging.Handler]] = []
_recorders: weakref.WeakSet = weakref.WeakSet()


class _RotatingFile(logging.handlers.RotatingFileHandler):
    """A size-rotating file whose directory and file appear with the first line logged."""

    def _open(self):
        os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
        return super()._open()


def check_writable_dir(path: str) -> None:
    """Create ``path`` if missing and create/remove a file in it; ``OSError`` if either
    fails (also for root on a read-only file system, where ``os.access`` says yes)."""
    os.makedirs(path, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
        pass


def parse_level(text: str) -> int:
    """``DEBUG``/``info``/``TRACE``/``WARN``/``5`` -> a logging level; ValueError otherwise."""
    t = text.strip().upper()
    if t == "WARN":
        t = "WARNING"
    if t.isdigit():
        return int(t)
    level = logging.getLevelName(t)
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {text!r}")
    return level


def setup_operational_logs(log_dir: str, levels: Mapping[str, int] | None = None,
                           max_bytes: int = DEFAULT_MAX_BYTES,
                           backups: int = DEFAULT_BACKUPS) -> list[str]:
    """Attach a size-rotating file handler per operational log under ``log_dir`` (created);
    ``levels`` overrides logger levels by name (any logger, e.g. ``kafka.request.logger``
    -> DEBUG). Returns the files' paths. A file (and ``log_dir``) is created with its first
    line. Calling it again replaces the earlier handlers.

    Raises ``OSError`` at once when ``log_dir`` cannot be created or written (rather than
    a logging traceback on the first line logged)."""
    log_dir = os.path.abspath(log_dir)
    check_writable_dir(log_dir)
    remove_operational_logs()
    formatter = logging.Formatter(KAFKA_LOG_FORMAT)
    paths = []
    for filename, (kafka_names, own_names, level) in OPERATIONAL_LOGS.items():
        path = os.path.join(log_dir, filename)
        handler = _RotatingFile(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True)
        handler.setFormatter(formatter)
        for name in kafka_names:
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.propagate = False
            logger.addHandler(handler)
            _installed.append((logger, handler))
        for name in own_names:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            _installed.append((logger, handler))
        paths.append(path)
    for name, level in (levels or {}).items():
        logging.getLogger(name).setLevel(level)
    for recorder in _recorders:
        recorder.refresh_log_level()
    return paths


def remove_operational_logs() -> None:
    """Detach the handlers; Kafka's loggers propagate again at their inherited level."""
    for logger, handler in _installed:
        logger.removeHandler(handler)
        handler.close()
    _installed.clear()
    for kafka_names, _, _ in OPERATIONAL_LOGS.values():
        for name in kafka_names:
            logger = logging.getLogger(name)
            logger.propagate = True
            logger.setLevel(logging.NOTSET)


def set_levels(levels: Iterable[tuple[str, int]]) -> None:
    """Change logger levels at run time (the request-log switch is re-read)."""
    for name, level in levels:
        logging.getLogger(name).setLevel(level)
    for recorder in _recorders:
        recorder.refresh_log_level()


# ----- the request log ------------------------------------------------------------------------

_REQUEST_LOG = logging.getLogger("kafka.request.logger")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _api_key_name(name: str) -> str:
    """``ListOffsets`` -> ``LIST_OFFSETS`` (Kafka's ``ApiKeys`` constant)."""
    return _CAMEL.sub("_", name).upper()


def _json_value(field, value, version: int):
    if value is None:
        return None
    if field.elem == "records":
        return None  # handled by the caller
    if field.struct is not None:
        if field.is_array:
            return [message_json(v, version) for v in value]
        return message_json(value, version)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    if field.is_array:
        return [_json_value(_Elem(field), v, version) for v in value]
    return value


class _Elem:
    """A field's element type, for arrays of plain values."""

    def __init__(self, field) -> None:
        self.elem = field.elem
        self.struct = None
        self.is_array = False


def message_json(msg, version: int) -> dict:
    """A generated message as Kafka's JSON converters write it (field names in lowerCamel;
    records as ``recordsSizeInBytes``; bytes base64; uuids in Kafka's base64 form)."""
    out: dict = {}
    for f in msg._schema.fields:
        if not in_range(f.versions, version):
            continue
        name = f.name[:1].lower() + f.name[1:]
        value = getattr(msg, f.attr, None)
        if f.elem == "records":
            if value is None:
                out[name] = None
            else:
                out[name + "SizeInBytes"] = len(value)
            continue
        out[name] = _json_value(f, value, version)
    return out


def request_json(request, deltas) -> str:
    """The JSON of Kafka's ``Completed request:`` line for a finished request."""
    from broker.metrics.request_metrics import request_name

    name = request_name(request.api_key)
    header: dict = {"requestApiKey": request.api_key, "requestApiVersion": request.api_version,
                    "correlationId": request.correlation_id}
    body = request.body
    client_id = None
    try:
        from protocol.headers import decode_request_header

        client_id = decode_request_header(request.frame)[0].client_id
    except Exception:  # noqa: BLE001 - a released or odd frame: leave it out
        pass
    header["clientId"] = client_id
    header["requestApiKeyName"] = _api_key_name(name)
    software = {"softwareName": "unknown", "softwareVersion": "unknown"}
    if request.api_key == 18 and body is not None and request.api_version >= 3:
        software = {"softwareName": body.client_software_name or "unknown",
                    "softwareVersion": body.client_software_version or "unknown"}
    ms = [round(d / 1e6, 3) for d in deltas]
    node = {
        "isForwarded": False,
        "requestHeader": header,
        "request": message_json(body, request.api_version) if body is not None else "",
        "response": (message_json(request.response_msg, request.api_version)
                     if request.response_msg is not None else ""),
        "connection": request.connection_id,
        "totalTimeMs": ms[5],
        "requestQueueTimeMs": ms[0],
        "localTimeMs": ms[1],
        "remoteTimeMs": ms[2],
        "throttleTimeMs": 0,
        "responseQueueTimeMs": ms[3],
        "sendTimeMs": ms[4],
        "securityProtocol": "PLAINTEXT",
        "principal": "User:ANONYMOUS",
        "listener": request.listener,
        "clientInformation": software,
    }
    return json.dumps(node, separators=(",", ":"), default=str)


def _log_request(request, deltas) -> None:
    try:
        _REQUEST_LOG.debug("Completed request:%s", request_json(request, deltas))
    except Exception:  # noqa: BLE001 - the request log must never break a response
        logging.getLogger(__name__).exception("cannot log request %r", request)


def attach_request_log(recorder) -> None:
    """Make ``recorder`` (``RequestMetricsRecorder``) write the request log while
    ``kafka.request.logger`` is at DEBUG or finer."""
    recorder.request_log = _log_request
    recorder.refresh_log_level()
    _recorders.add(recorder)
