"""`BrokerLinks`: one connection per other broker on the inter-broker listener (transaction
markers, KIP-890 verification, the share persister); the coordinators' `inter_broker`
(`coordinator.runtime.InterBrokerClient`)."""

from __future__ import annotations

__all__ = ["BrokerLinks"]


class BrokerLinks:
    """`await request(broker_id, api_key, body, min_version=None) -> response` over a
    `client.aio_connection.BrokerConnection` opened on first use (request.timeout.ms as its
    timeout; TLS/SASL per the inter-broker listener through
    `broker.security.inter_broker.opener_for`) and reopened after a failure; ConnectionError when the broker has no endpoint
    on `listener` or cannot be reached. `close()` closes them all."""

    def __init__(self, services, listener: str, client_id: str) -> None:
        self.services = services
        self.listener = listener
        self.client_id = client_id
        self._connections: dict[int, object] = {}

    async def _connection(self, broker_id: int):
        conn = self._connections.get(broker_id)
        if conn is not None and conn.connected:
            return conn
        node = self.services.metadata_cache.alive_broker_node(broker_id, self.listener)
        if node is None:
            raise ConnectionError(f"broker {broker_id} has no {self.listener} endpoint")
        from broker.security.inter_broker import opener_for
        from client.aio_connection import BrokerConnection
        conn = BrokerConnection(node.host, node.port, self.client_id,
                                timeout_s=self.services.config.get("request.timeout.ms") / 1000,
                                opener=opener_for(self.services.config, node.host, node.port))
        await conn.connect()
        self._connections[broker_id] = conn
        return conn

    async def request(self, broker_id: int, api_key: int, body, min_version: int | None = None):
        try:
            conn = await self._connection(broker_id)
            version = conn.version_for(api_key, min_version=min_version)
            return (await conn.request(api_key, body, version))[1]
        except (ConnectionError, OSError, TimeoutError):
            self._connections.pop(broker_id, None)
            raise

    async def close(self) -> None:
        conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
