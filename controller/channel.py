"""LocalControllerChannel: delivers decisions in-process to this broker's listener.

The embedded controller and the broker live in one process, so a "send" is an awaited call
of the matching :class:`~controller.api.BrokerMetadataListener` method. Decisions for any
other broker id are a programming error (``ValueError``). A listener failure is logged with
the decision's kind and swallowed, as Kafka's controller logs a failed response and carries
on; ``failures`` counts them (tests and metrics read it).
"""

from __future__ import annotations

import logging
from typing import Any

from controller.api import BrokerMetadataListener, ControllerChannel

log = logging.getLogger(__name__)


class LocalControllerChannel(ControllerChannel):
    def __init__(self, broker_id: int, listener: BrokerMetadataListener) -> None:
        self.broker_id = broker_id
        self.listener = listener
        self.failures = 0

    def _check(self, broker_id: int) -> None:
        if broker_id != self.broker_id:
            raise ValueError(f"local channel of broker {self.broker_id} cannot reach {broker_id}")

    async def _deliver(self, kind: str, call: Any) -> Any:
        try:
            return await call
        except Exception:
            self.failures += 1
            log.exception("broker %d failed to apply %s", self.broker_id, kind)
            return None

    async def send_leader_and_isr(self, broker_id: int, request: Any) -> dict | None:
        """The broker's ``{(topic, partition): error code}`` (None if it failed)."""
        self._check(broker_id)
        return await self._deliver("LeaderAndIsr", self.listener.on_leader_and_isr(request))

    async def send_update_metadata(self, broker_id: int, request: Any) -> None:
        self._check(broker_id)
        await self._deliver("UpdateMetadata", self.listener.on_update_metadata(request))

    async def send_stop_replica(self, broker_id: int, request: Any) -> None:
        self._check(broker_id)
        await self._deliver("StopReplica", self.listener.on_stop_replica(request))

    async def send_topic_config_change(self, broker_id: int, topic: str,
                                       configs: dict[str, str]) -> None:
        self._check(broker_id)
        await self._deliver("topic config change",
                            self.listener.on_topic_config_change(topic, configs))
