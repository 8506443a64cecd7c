"""TLS for accepted connections, with the handshake's CPU off the event loop.

``TlsServerProtocol`` is the asyncio protocol of an accepted TCP socket on an SSL/SASL_SSL
listener. It runs TLS through an ``ssl.SSLObject`` over memory BIOs and presents itself to
the connection's own protocol (the broker's ``Processor``) as its transport, from the moment
the TCP connection is accepted (so connection limits and the idle sweep count it at once,
as Kafka's Acceptor does). Nothing reaches the app protocol until the handshake completed.

* Handshake: every ``do_handshake`` step (the server's key exchange and signature after the
  ClientHello, the client-certificate check after the client's Finished) runs in a small
  dedicated thread pool (``tls-handshake``; OpenSSL releases the GIL while it works). Bytes
  arriving meanwhile are queued and fed to the BIO between steps, so the SSL object is only
  ever touched by one thread at a time. A failed handshake (random bytes, an untrusted or
  missing client certificate with ``ssl.client.auth=required``, no common protocol or
  cipher) sends OpenSSL's alert, is logged once as Kafka does ("Failed authentication with
  /<ip> (channelId=...) (SSL handshake failed)") and closes only that connection.
* Data: decryption writes straight into the app protocol's ``get_buffer()`` (a large
  request frame lands in its own buffer); ``write`` encrypts into the TCP transport. There
  is no sendfile over TLS: the Processor sees ``get_extra_info("sslcontext")`` and reads
  file slices with ``pread`` into ``write`` (Kafka's ``SslTransportLayer`` also copies).
* Flow control: the app's ``pause_reading`` pauses the TCP transport (plaintext already
  decrypted stays in the SSL object and is delivered on ``resume_reading``); the TCP
  transport's ``pause_writing``/``resume_writing`` are passed to the app; write-buffer
  size and limits are the TCP transport's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import ssl
from collections.abc import Callable
from typing import Any

__all__ = ["TlsServerProtocol", "handshake_executor"]

# Client side (inter-broker connections): ``TlsServerProtocol(ctx, app, server_side=False,
# server_hostname=host)`` sends the ClientHello at connect; ``handshake_done`` resolves when
# the handshake finished (or fails with its error).

log = logging.getLogger("broker.security.tls")

_EXECUTOR: concurrent.futures.ThreadPoolExecutor | None = None
HANDSHAKE_THREADS = 2


def handshake_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool that runs TLS handshake steps (created on first use)."""
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = concurrent.futures.ThreadPoolExecutor(
            max_workers=HANDSHAKE_THREADS, thread_name_prefix="tls-handshake")
    return _EXECUTOR


class TlsServerProtocol(asyncio.Protocol):
    """Server side TLS over one accepted TCP connection; ``app`` is the connection's protocol
    (``asyncio.BufferedProtocol`` or ``asyncio.Protocol``). ``context`` is the listener's
    current ``SSLContext`` (a keystore reload gives new connections a new one).
    ``on_handshake_failed(app, reason)`` is called once if the handshake fails."""

    def __init__(self, context: ssl.SSLContext, app: asyncio.BaseProtocol, *,
                 on_handshake_failed: Callable[[Any, str], None] | None = None,
                 server_side: bool = True, server_hostname: str | None = None) -> None:
        self.context = context
        self.app = app
        self.server_side = server_side
        self.server_hostname = server_hostname
        self.handshake_done: asyncio.Future[None] = \
            asyncio.get_running_loop().create_future()
        self.on_handshake_failed = on_handshake_failed
        self._buffered = isinstance(app, asyncio.BufferedProtocol)
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._sslobj: ssl.SSLObject | None = None
        self._tcp: asyncio.Transport | None = None
        self._handshaking = True
        self._step_running = False
        self._pending_in: list[bytes] = []
        self._pending_out: list[bytes] = []
        self._app_reading = True
        self._closing = False
        self._lost = False
        self._read_scheduled = False
        self._transport = _TlsTransport(self)

    # ---- TCP side ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._tcp = transport
        self._sslobj = self.context.wrap_bio(self._in, self._out, server_side=self.server_side,
                                             server_hostname=self.server_hostname)
        self.app.connection_made(self._transport)
        if not self.server_side:
            self._start_step()  # the ClientHello

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._closing = True
        if not self.handshake_done.done():
            self.handshake_done.set_exception(exc or ConnectionError("connection closed during "
                                                                     "the TLS handshake"))
            self.handshake_done.exception()  # retrieved: nobody may be waiting
        self.app.connection_lost(exc)

    def eof_received(self) -> bool | None:
        if self._handshaking:
            return False
        self._read_plaintext()  # anything still decrypted first
        return self.app.eof_received()

    def pause_writing(self) -> None:
        self.app.pause_writing()

    def resume_writing(self) -> None:
        self.app.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._handshaking:
            self._pending_in.append(data)
            if not self._step_running:
                self._start_step()
            return
        self._in.write(data)
        self._read_plaintext()

    # ---- handshake ---------------------------------------------------------------------------
    def _start_step(self) -> None:
        for chunk in self._pending_in:
            self._in.write(chunk)
        self._pending_in.clear()
        self._step_running = True
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(handshake_executor(), self._handshake_step)
        fut.add_done_callback(self._step_done)

    def _handshake_step(self) -> bool:
        """In a handshake thread: True once the handshake is complete."""
        assert self._sslobj is not None
        try:
            self._sslobj.do_handshake()
            return True
        except ssl.SSLWantReadError:
            return False

    def _step_done(self, fut: asyncio.Future[bool]) -> None:
        self._step_running = False
        if self._closing:
            return
        self._flush_out()
        if fut.cancelled():
            self._fail("handshake cancelled")
            return
        exc = fut.exception()
        if exc is not None:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            if not self.handshake_done.done():
                self.handshake_done.set_exception(exc)
                self.handshake_done.exception()
            self._fail(f"SSL handshake failed: {reason}")
            return
        if not fut.result():
            if self._pending_in:
                self._start_step()
            return
        self._handshaking = False
        if not self.handshake_done.done():
            self.handshake_done.set_result(None)
        for chunk in self._pending_in:
            self._in.write(chunk)
        self._pending_in.clear()
        for chunk in self._pending_out:
            self._encrypt(chunk)
        self._pending_out.clear()
        self._flush_out()
        self._read_plaintext()

    def _fail(self, reason: str) -> None:
        if self.on_handshake_failed is not None:
            try:
                self.on_handshake_failed(self.app, reason)
            except Exception:  # noqa: BLE001 - logging must not break the close
                log.exception("handshake failure callback failed")
        self._close_tcp()

    # ---- data --------------------------------------------------------------------------------
    def _read_plaintext(self) -> None:
        self._read_scheduled = False
        sslobj = self._sslobj
        if sslobj is None or self._handshaking or self._lost:
            return
        app = self.app
        try:
            while self._app_reading and not self._closing:
                if self._buffered:
                    buf = app.get_buffer(-1)  # type: ignore[attr-defined]
                    n = sslobj.read(len(buf), buf)
                    if not n:  # the client's close_notify
                        raise ssl.SSLZeroReturnError()
                    app.buffer_updated(n)  # type: ignore[attr-defined]
                else:
                    data = sslobj.read(65536)
                    if not data:
                        raise ssl.SSLZeroReturnError()
                    app.data_received(data)  # type: ignore[attr-defined]
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:  # the client's close_notify: answer it and close
            self._flush_out()
            if not self.app.eof_received():
                self._transport.close()
            return
        except ssl.SSLError as e:
            log.info("closing TLS connection from %s: %s", self._peer(), e)
            self._close_tcp()
            return
        self._flush_out()

    def _encrypt(self, data: bytes | bytearray | memoryview) -> None:
        assert self._sslobj is not None
        view = memoryview(data).cast("B")
        while view:
            n = self._sslobj.write(view)
            view = view[n:]

    def _flush_out(self) -> None:
        if self._out.pending and self._tcp is not None and not self._tcp.is_closing():
            self._tcp.write(self._out.read())

    def _peer(self) -> Any:
        return self._tcp.get_extra_info("peername") if self._tcp is not None else None

    def _close_tcp(self) -> None:
        self._closing = True
        if self._tcp is not None:
            self._tcp.close()

    # ---- the app protocol's transport ---------------------------------------------------------
    def app_write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        if self._handshaking:
            self._pending_out.append(bytes(data))
            return
        try:
            self._encrypt(data)
        except ssl.SSLError as e:
            log.info("closing TLS connection to %s: %s", self._peer(), e)
            self._close_tcp()
            return
        self._flush_out()

    def app_pause_reading(self) -> None:
        self._app_reading = False
        if self._tcp is not None and self._tcp.is_reading():
            self._tcp.pause_reading()

    def app_resume_reading(self) -> None:
        self._app_reading = True
        if self._tcp is not None and not self._tcp.is_closing() and not self._tcp.is_reading():
            self._tcp.resume_reading()
        if not self._read_scheduled:  # plaintext may already wait in the SSL object
            self._read_scheduled = True
            asyncio.get_running_loop().call_soon(self._read_plaintext)

    def app_close(self) -> None:
        if self._closing:
            return
        if not self._handshaking and self._sslobj is not None and not self._step_running:
            try:
                self._sslobj.unwrap()  # queue our close_notify
            except (ssl.SSLError, ValueError):
                pass
            self._flush_out()
        self._close_tcp()

    def app_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "sslcontext":
            return self.context
        if name == "ssl_object":
            return self._sslobj
        if name == "peercert":
            return None if self._handshaking or self._sslobj is None else \
                self._sslobj.getpeercert()
        if name == "cipher":
            return None if self._handshaking or self._sslobj is None else self._sslobj.cipher()
        if self._tcp is None:
            return default
        return self._tcp.get_extra_info(name, default)

    @property
    def handshake_complete(self) -> bool:
        return not self._handshaking


class _TlsTransport(asyncio.Transport):
    """What the app protocol holds as its transport."""

    def __init__(self, conn: TlsServerProtocol) -> None:
        super().__init__()
        self._conn = conn

    def write(self, data) -> None:
        self._conn.app_write(data)

    def writelines(self, list_of_data) -> None:
        self._conn.app_write(b"".join(list_of_data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._conn.app_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._conn._closing

    def close(self) -> None:
        self._conn.app_close()

    def abort(self) -> None:
        self._conn._closing = True
        if self._conn._tcp is not None:
            self._conn._tcp.abort()

    def pause_reading(self) -> None:
        self._conn.app_pause_reading()

    def resume_reading(self) -> None:
        self._conn.app_resume_reading()

    def is_reading(self) -> bool:
        return self._conn._app_reading

    def get_write_buffer_size(self) -> int:
        tcp = self._conn._tcp
        return tcp.get_write_buffer_size() if tcp is not None else 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        tcp = self._conn._tcp
        return tcp.get_write_buffer_limits() if tcp is not None else (0, 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        tcp = self._conn._tcp
        if tcp is not None:
            tcp.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._conn.app

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._conn.app = protocol
        self._conn._buffered = isinstance(protocol, asyncio.BufferedProtocol)
