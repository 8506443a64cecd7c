"""A small blocking Kafka protocol client for the ``josef`` tools (stdlib sockets + protocol).

It speaks to any Kafka-compatible broker (Josef or Apache Kafka): on connect it sends
ApiVersions (v3, falling back to v0 when the broker answers UNSUPPORTED_VERSION, as Kafka's
clients do, KIP-511) and every later request uses the highest version both sides support
(:meth:`KafkaClient.version_for`). Requests go to the bootstrap broker unless a ``node`` id
is given; node addresses come from Metadata.

Frames: a 4-byte big-endian size, then the request header (v1, or v2 for flexible
versions) and the body, encoded by :mod:`protocol.api`. Responses larger than
``max_response_bytes`` (default 100 MiB) are refused rather than buffered.

Errors: :class:`ToolError` with a one-line message (unreachable bootstrap, timeouts, no
common version, a closed connection, a failed TLS handshake or SASL authentication). Kafka
error codes inside responses are left to the caller; :func:`error_name` turns one into its
name.

Security: ``security`` (a :class:`client.security.ClientSecurity`, or Kafka client
properties such as ``security.protocol``, ``ssl.truststore.location``, ``sasl.mechanism``,
``sasl.jaas.config``) makes every connection TLS and/or SASL: after ApiVersions each
connection sends SaslHandshake v1 and SaslAuthenticate requests until the mechanism is done.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from client.security import ClientSecurity
from client.versions import default_max_version
from protocol import api
from protocol.errors import ErrorCode
from protocol.headers import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
    response_header_version,
)

__all__ = ["KafkaClient", "ToolError", "build", "decode_response_frame", "encode_request_frame",
           "error_name", "parse_bootstrap"]

API_VERSIONS = 18
METADATA = 3
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_SIZE = struct.Struct(">i")


class ToolError(Exception):
    """A failure a tool reports as one line on stderr with a non-zero exit code."""


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_{code}"


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` -> addresses; ToolError for a malformed entry."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ToolError(f"invalid bootstrap server {item!r} (expected host:port)")
        out.append((host.strip("[]") or "localhost", int(port)))
    if not out:
        raise ToolError("no bootstrap server given (--bootstrap-server host:port)")
    return out


def build(cls: type, value: Any):
    """A generated message/struct from a dict (nested dicts and lists of dicts allowed);
    a message object passes through unchanged. Unknown keys raise ToolError."""
    if not isinstance(value, Mapping):
        return value
    fields = {f.attr: f for f in cls._schema.fields}
    kwargs = {}
    for k, v in value.items():
        f = fields.get(k)
        if f is None:
            raise ToolError(f"{cls.__qualname__} has no field {k!r}")
        if f.struct is not None and v is not None:
            v = [build(f.struct.cls, x) for x in v] if f.is_array else build(f.struct.cls, v)
        kwargs[k] = v
    return cls(**kwargs)


def encode_request_frame(api_key: int, version: int, correlation_id: int, client_id: str,
                         body) -> bytes:
    """A whole request frame: 4-byte size, request header (v1, or v2 for flexible versions),
    then ``body`` (a generated request message) encoded in ``version``."""
    header = encode_request_header(RequestHeader(api_key, version, correlation_id, client_id))
    payload = header + body.encode(version)
    return _SIZE.pack(len(payload)) + payload


def decode_response_frame(api_key: int, version: int, frame, correlation_id: int | None = None):
    """Decode a response frame (without its size prefix) -> (correlation id, message).
    ApiVersions responses use header v0 (KIP-511). ``correlation_id``, when given, must
    match (ToolError otherwise)."""
    hv = 0 if api_key == API_VERSIONS else response_header_version(api_key, version)
    got, pos = decode_response_header(frame, hv)
    if correlation_id is not None and got != correlation_id:
        raise ToolError(f"correlation id {got} != {correlation_id}")
    return got, api.decode_response(api_key, version, frame, pos)


class _Connection:
    def __init__(self, host: str, port: int, timeout: float, max_bytes: int,
                 security: ClientSecurity | None = None) -> None:
        self.address = f"{host}:{port}"
        self.max_bytes = max_bytes
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ToolError(f"cannot connect to {self.address}: {e.strerror or e}") from None
        self.sock.settimeout(timeout)
        if security is not None and security.uses_ssl:
            try:
                self.sock = security.ssl_context().wrap_socket(self.sock, server_hostname=host)
            except (ssl.SSLError, OSError) as e:
                self.close()
                raise ToolError(f"SSL handshake with {self.address} failed: "
                                f"{getattr(e, 'reason', None) or e}") from None
            except ValueError as e:
                self.close()
                raise ToolError(f"bad SSL client configuration: {e}") from None

    def round_trip(self, frame: bytes) -> memoryview:
        self.send(frame)
        return self.receive()

    def receive(self) -> memoryview:
        """The next response frame (without its size prefix)."""
        try:
            (size,) = _SIZE.unpack(self._recv(4))
            if size < 0 or size > self.max_bytes:
                raise ToolError(f"{self.address}: response of {size} bytes refused")
            return memoryview(self._recv(size))
        except TimeoutError:
            raise ToolError(f"{self.address}: request timed out") from None
        except OSError as e:
            raise ToolError(f"{self.address}: {e.strerror or e}") from None

    def send(self, frame: bytes) -> None:
        try:
            self.sock.sendall(frame)
        except TimeoutError:
            raise ToolError(f"{self.address}: request timed out") from None
        except OSError as e:
            raise ToolError(f"{self.address}: {e.strerror or e}") from None

    def _recv(self, n: int) -> bytearray:
        """Exactly ``n`` bytes, read into one buffer (no per-chunk copies)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ToolError(f"{self.address}: connection closed by the broker")
            got += k
        return buf

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class KafkaClient:
    """Blocking client: ``with KafkaClient("host:9092") as c: c.request(3, {...})``."""

    def __init__(self, bootstrap: str, client_id: str = "josef-tools", timeout: float = 30.0,
                 max_response_bytes: int = 100 << 20,
                 security: ClientSecurity | Mapping[str, str] | None = None) -> None:
        if security is not None and not isinstance(security, ClientSecurity):
            try:
                security = ClientSecurity(security)
            except ValueError as e:
                raise ToolError(f"bad client security configuration: {e}") from None
        self.security = security
        self.client_id = client_id
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._correlation = 0
        self._conns: dict[int | None, _Connection] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        errors = []
        for host, port in parse_bootstrap(bootstrap):
            try:
                conn = _Connection(host, port, timeout, max_response_bytes, security)
            except ToolError as e:
                errors.append(str(e))
                continue
            self._conns[None] = conn
            break
        else:
            raise ToolError("; ".join(errors) or "no bootstrap server reachable")
        try:
            self.versions = self._api_versions(self._conns[None])
            self._authenticate(self._conns[None])
        except BaseException:
            self.close()
            raise

    def _authenticate(self, conn: _Connection) -> None:
        """SASL: SaslHandshake v1, then SaslAuthenticate until the mechanism is done."""
        if self.security is None or not self.security.uses_sasl:
            return
        sasl = self.security.sasl_client()
        resp = self._send(conn, SASL_HANDSHAKE, 1, build(
            api.API_KEYS[SASL_HANDSHAKE].request_cls, {"mechanism": sasl.mechanism}))
        if resp.error_code:
            raise ToolError(f"{conn.address}: SASL handshake failed: "
                            f"{error_name(resp.error_code)} (broker mechanisms: "
                            f"{', '.join(resp.mechanisms)})")
        version = min(2, self.versions.get(SASL_AUTHENTICATE, (0, 0))[1])
        try:
            token: bytes | None = sasl.first()
            while token is not None:
                resp = self._send(conn, SASL_AUTHENTICATE, version, build(
                    api.API_KEYS[SASL_AUTHENTICATE].request_cls, {"auth_bytes": token}))
                if resp.error_code:
                    raise ToolError(f"{conn.address}: SASL authentication failed: "
                                    f"{error_name(resp.error_code)}: {resp.error_message}")
                token = sasl.respond(bytes(resp.auth_bytes or b""))
        except ValueError as e:
            raise ToolError(f"{conn.address}: SASL authentication failed: {e}") from None
        except Exception as e:
            if isinstance(e, ToolError):
                raise
            raise ToolError(f"{conn.address}: SASL authentication failed: {e}") from None

    # --- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- versions -------------------------------------------------------------------------
    def _api_versions(self, conn: _Connection) -> dict[int, tuple[int, int]]:
        spec = api.API_KEYS[API_VERSIONS]
        for version in (3, 0):
            body = {"client_software_name": "josef-tools",
                    "client_software_version": "1"} if version >= 3 else {}
            resp = self._send(conn, API_VERSIONS, version, build(spec.request_cls, body),
                              tolerate_decode_error=version > 0)
            if resp is None or resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                continue
            if resp.error_code:
                raise ToolError(f"ApiVersions failed: {error_name(resp.error_code)}")
            return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        raise ToolError(f"{conn.address}: ApiVersions failed")

    def supports(self, api_key: int) -> bool:
        return api_key in self.versions and api_key in api.API_KEYS

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The highest version of ``api_key`` both sides support (capped at
        ``max_version``); ToolError if there is none."""
        spec = api.API_KEYS.get(api_key)
        theirs = self.versions.get(api_key)
        name = spec.name if spec else str(api_key)
        if spec is None or theirs is None:
            raise ToolError(f"the broker does not support the {name} API")
        hi = min(spec.max_version, theirs[1], max_version if max_version is not None
                 else default_max_version(api_key, spec.max_version))
        lo = max(spec.min_version, theirs[0])
        if hi < lo:
            raise ToolError(f"no {name} version in common with the broker "
                            f"(ours {spec.min_version}-{spec.max_version}, "
                            f"broker {theirs[0]}-{theirs[1]})")
        return hi

    # --- requests -------------------------------------------------------------------------
    def _send(self, conn: _Connection, api_key: int, version: int, body,
              tolerate_decode_error: bool = False):
        return self._receive(conn, self._write(conn, api_key, version, body),
                             tolerate_decode_error)

    def _write(self, conn: _Connection, api_key: int, version: int, body) -> tuple:
        self._correlation += 1
        cid = self._correlation
        conn.send(encode_request_frame(api_key, version, cid, self.client_id, body))
        return (conn, api_key, version, cid)

    def _receive(self, conn: _Connection, ticket: tuple, tolerate_decode_error: bool = False):
        _conn, api_key, version, cid = ticket
        buf = conn.receive()
        try:
            return decode_response_frame(api_key, version, buf, cid)[1]
        except ToolError as e:
            raise ToolError(f"{conn.address}: {e}") from None
        except Exception as e:  # noqa: BLE001 - reported as one line
            if tolerate_decode_error:
                return None
            raise ToolError(f"{conn.address}: malformed response to api {api_key} "
                            f"v{version}: {e}") from None

    def send_request(self, api_key: int, body, version: int, node: int | None = None) -> tuple:
        """Send one request without waiting for its answer (pipelining, as Kafka's clients
        do with several requests in flight per connection); returns a ticket for
        :meth:`receive_response`. A broker answers a connection's requests in order, so
        tickets of one node must be received in the order they were sent."""
        body = build(api.API_KEYS[api_key].request_cls, body)
        conn = self._connection(node)
        return self._write(conn, api_key, version, body)

    def receive_response(self, ticket: tuple):
        """The decoded response to a :meth:`send_request` ticket (blocks until it arrives)."""
        return self._receive(ticket[0], ticket)

    def request(self, api_key: int, body, version: int | None = None,
                node: int | None = None, timeout: float | None = None):
        """Send one request (a message or a dict of its fields) and return the decoded
        response. ``version`` defaults to the highest common one; ``node`` picks a broker
        by id (from the last Metadata), default the bootstrap connection. ``timeout``
        (seconds) overrides the socket timeout for this round trip only (a JoinGroup parks
        up to the rebalance timeout)."""
        if version is None:
            version = self.version_for(api_key)
        body = build(api.API_KEYS[api_key].request_cls, body)
        conn = self._connection(node)
        if timeout is None:
            return self._send(conn, api_key, version, body)
        conn.sock.settimeout(timeout)
        try:
            return self._send(conn, api_key, version, body)
        finally:
            conn.sock.settimeout(self.timeout)

    def reset_connection(self, node: int) -> None:
        """Close the connection to broker ``node`` (not the bootstrap one); the next request
        to it reconnects. For a connection left mid-response (an interrupted request)."""
        conn = self._conns.pop(node, None)
        if conn is not None:
            conn.close()

    def send_no_response(self, api_key: int, body, version: int | None = None,
                         node: int | None = None) -> None:
        """Send a request the broker does not answer (Produce with acks=0)."""
        if version is None:
            version = self.version_for(api_key)
        body = build(api.API_KEYS[api_key].request_cls, body)
        self._correlation += 1
        self._connection(node).send(
            encode_request_frame(api_key, version, self._correlation, self.client_id, body))

    def _connection(self, node: int | None) -> _Connection:
        conn = self._conns.get(node)
        if conn is not None:
            return conn
        if node not in self._nodes:
            self.metadata([])
        addr = self._nodes.get(node)
        if addr is None:
            raise ToolError(f"broker {node} is not in the cluster metadata")
        conn = _Connection(addr[0], addr[1], self.timeout, self.max_response_bytes,
                           self.security)
        try:
            self._authenticate(conn)
        except ToolError:
            conn.close()
            raise
        self._conns[node] = conn
        return conn

    def metadata(self, topics: list[str] | None = None, auto_create: bool = False):
        """Metadata for ``topics`` (None = all, [] = brokers only); remembers the brokers.
        ``auto_create`` lets the broker create missing topics (``allow_auto_topic_creation``,
        v4+), as a producer's Metadata requests do."""
        version = self.version_for(METADATA, max_version=12)
        if topics is None:
            body = {"topics": None}
        else:
            body = {"topics": [{"name": t} for t in topics]}
        if version >= 4:
            body["allow_auto_topic_creation"] = auto_create
        resp = self.request(METADATA, body, version=version)
        self._nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return resp

    def node_address(self, node: int) -> tuple[str, int]:
        """(host, port) of broker ``node`` (from Metadata); ToolError when unknown."""
        if node not in self._nodes:
            self.metadata([])
        addr = self._nodes.get(node)
        if addr is None:
            raise ToolError(f"broker {node} is not in the cluster metadata")
        return addr

    def controller_node(self) -> int | None:
        resp = self.metadata([])
        cid = getattr(resp, "controller_id", -1)
        return cid if cid is not None and cid >= 0 else None
