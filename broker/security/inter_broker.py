"""The client side of inter-broker connections (controller channel, replica fetchers,
transaction markers): ``await inter_broker_connect(config, host, port)``.

The connection uses the inter-broker listener (``inter.broker.listener.name``, else the
listener named like ``security.inter.broker.protocol``) and its security protocol:

* SSL / SASL_SSL: TLS with that listener's ``ssl.*`` settings (``listener.name.<l>.ssl.*``
  over ``ssl.*``): the truststore verifies the other broker, the keystore is presented
  (needed where ``ssl.client.auth=required``), ``ssl.endpoint.identification.algorithm=https``
  (Kafka's default) checks the host name against the certificate. The handshake runs in the
  TLS handshake threads, like the server side.
* SASL_PLAINTEXT / SASL_SSL: mechanism ``sasl.mechanism.inter.broker.protocol``, credentials
  from the listener's JAAS entry for it (``listener.name.<l>.<mechanism>.sasl.jaas.config``,
  then ``sasl.jaas.config``): ``username``/``password`` for PLAIN and SCRAM,
  ``unsecuredLoginStringClaim_sub`` for OAUTHBEARER; SaslHandshake v1 + SaslAuthenticate v2
  (SCRAM's PBKDF2 runs in an executor).

Returns ``(asyncio.StreamReader, asyncio.StreamWriter)`` ready for Kafka requests (the caller
sends ApiVersions etc. as usual). Raises ``ConnectionError`` (unreachable, TLS failure) or
``InterBrokerAuthenticationError`` (the other broker refused the credentials). A PLAINTEXT
inter-broker listener gives a plain connection.
"""

from __future__ import annotations

import asyncio
import struct

from protocol import api
from protocol.headers import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
    response_header_version,
)

__all__ = ["InterBrokerAuthenticationError", "inter_broker_connect", "inter_broker_security",
           "opener_for"]

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class InterBrokerAuthenticationError(ConnectionError):
    """SASL authentication to another broker failed (the message carries its error)."""


def inter_broker_security(config) -> dict[str, str]:
    """The inter-broker listener's client settings as Kafka client properties
    (``security.protocol``, ``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``)."""
    listener = config.inter_broker_listener_name
    protocol = config.listener_security_protocol_map.get(listener, listener)
    props = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        for key in ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
                    "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
                    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
                    "ssl.truststore.certificates", "ssl.endpoint.identification.algorithm",
                    "ssl.enabled.protocols", "ssl.cipher.suites"):
            value = config.listener_get(listener, key)
            if value is not None:
                props[key] = ",".join(value) if isinstance(value, list) else str(value)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = config.get("sasl.mechanism.inter.broker.protocol")
        props["sasl.mechanism"] = mechanism
        jaas = config.listener_get(listener, "sasl.jaas.config", mechanism=mechanism)
        if jaas is not None:
            props["sasl.jaas.config"] = jaas
    return props


def opener_for(config, host: str, port: int, client_id: str | None = None):
    """The ``opener`` of a ``client.aio_connection.BrokerConnection`` to another broker
    (``async () -> (reader, writer)`` through :func:`inter_broker_connect`), or None when the
    inter-broker listener is PLAINTEXT (a plain TCP connection)."""
    if config is None or inter_broker_security(config).get("security.protocol",
                                                           "PLAINTEXT") == "PLAINTEXT":
        return None
    return lambda: inter_broker_connect(config, host, port, client_id=client_id)


async def inter_broker_connect(config, host: str, port: int, *, timeout: float = 30.0,
                               client_id: str | None = None
                               ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to another broker's inter-broker listener at ``host:port`` (see the module
    docstring)."""
    from client.security import ClientSecurity

    security = ClientSecurity(inter_broker_security(config))
    client_id = client_id or f"broker-{config.broker_id}"
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        if security.uses_ssl:
            from broker.security.tls_transport import TlsServerProtocol

            reader = asyncio.StreamReader(limit=2**16)
            app = asyncio.StreamReaderProtocol(reader)
            ctx = await loop.run_in_executor(None, security.ssl_context)
            tls = None

            def factory():
                nonlocal tls
                tls = TlsServerProtocol(ctx, app, server_side=False, server_hostname=host)
                return tls

            transport, _ = await loop.create_connection(factory, host, port)
            try:
                await tls.handshake_done
            except (OSError, ValueError) as e:
                transport.close()
                raise ConnectionError(f"TLS handshake with {host}:{port} failed: {e}") from e
            writer = asyncio.StreamWriter(tls._transport, app, reader, loop)
        else:
            reader, writer = await asyncio.open_connection(host, port)
        if security.uses_sasl:
            try:
                await _authenticate(reader, writer, security, client_id)
            except BaseException:
                writer.close()
                raise
    return reader, writer


async def _round_trip(reader, writer, key: int, version: int, cid: int, client_id: str, body):
    head = encode_request_header(RequestHeader(key, version, cid, client_id))
    payload = head + api.encode_request(body, version)
    writer.write(struct.pack(">i", len(payload)) + payload)
    await writer.drain()
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = memoryview(await reader.readexactly(size))
    got, offset = decode_response_header(frame, response_header_version(key, version))
    if got != cid:
        raise ConnectionError(f"correlation id {got} != {cid}")
    return api.decode_response(key, version, frame, offset)


async def _authenticate(reader, writer, security, client_id: str) -> None:
    sasl = security.sasl_client()
    handshake = api.API_KEYS[SASL_HANDSHAKE].request_cls(mechanism=sasl.mechanism)
    resp = await _round_trip(reader, writer, SASL_HANDSHAKE, 1, 1, client_id, handshake)
    if resp.error_code:
        raise InterBrokerAuthenticationError(
            f"SASL handshake with mechanism {sasl.mechanism} failed: error {resp.error_code} "
            f"(enabled: {', '.join(resp.mechanisms)})")
    loop = asyncio.get_running_loop()
    token = await loop.run_in_executor(None, sasl.first)
    cid = 2
    while token is not None:
        request = api.API_KEYS[SASL_AUTHENTICATE].request_cls(auth_bytes=token)
        resp = await _round_trip(reader, writer, SASL_AUTHENTICATE, 2, cid, client_id, request)
        cid += 1
        if resp.error_code:
            raise InterBrokerAuthenticationError(
                f"SASL authentication failed: error {resp.error_code}: {resp.error_message}")
        challenge = bytes(resp.auth_bytes or b"")
        token = await loop.run_in_executor(None, sasl.respond, challenge)
