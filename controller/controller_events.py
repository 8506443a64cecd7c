"""The ZooKeeper controller's events (Kafka's ``ControllerEvent`` case classes).

Events that answer a caller carry an ``asyncio.Future``; ``preempt()`` (the queue was
cleared, e.g. on session expiry) completes it with NOT_CONTROLLER as Kafka's preempt does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from controller.event_manager import ControllerEvent
from protocol.errors import ErrorCode

# ElectionTrigger
ZK_TRIGGERED, AUTO_TRIGGERED, ADMIN_CLIENT_TRIGGERED = "zk", "auto", "admin"


class _Simple(ControllerEvent):
    def __init__(self) -> None:
        pass


class Startup(_Simple):
    state = "ControllerChange"


class ControllerChange(_Simple):
    state = "ControllerChange"


class Reelect(_Simple):
    state = "ControllerChange"


class RegisterBrokerAndReelect(_Simple):
    state = "ControllerChange"


class Expire(_Simple):
    state = "ControllerChange"


class BrokerChange(_Simple):
    state = "BrokerChange"


class BrokerModifications(ControllerEvent):
    state = "BrokerChange"

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id


class TopicChange(_Simple):
    state = "TopicChange"


class PartitionModifications(ControllerEvent):
    state = "TopicChange"

    def __init__(self, topic: str) -> None:
        self.topic = topic


class TopicDeletion(_Simple):
    state = "TopicDeletion"


class IsrChangeNotification(_Simple):
    state = "IsrChange"


class ZkPartitionReassignment(_Simple):
    state = "AlterPartitionReassignment"


class AutoPreferredReplicaLeaderElection(_Simple):
    state = "AutoLeaderBalance"


class UncleanLeaderElectionEnable(_Simple):
    state = "UncleanLeaderElectionEnable"


class TopicUncleanLeaderElectionEnable(ControllerEvent):
    state = "TopicUncleanLeaderElectionEnable"

    def __init__(self, topic: str) -> None:
        self.topic = topic


class LogDirEventNotification(_Simple):
    state = "LogDirChange"


class LeaderAndIsrResponseReceived(ControllerEvent):
    state = "LeaderAndIsrResponseReceived"

    def __init__(self, response: Any, broker_id: int) -> None:
        self.response = response
        self.broker_id = broker_id


class TopicDeletionStopReplicaResponseReceived(ControllerEvent):
    state = "TopicDeletion"

    def __init__(self, broker_id: int, request_error: int, partition_errors: dict) -> None:
        self.broker_id = broker_id
        self.request_error = request_error
        self.partition_errors = partition_errors


class _WithFuture(ControllerEvent):
    """An event answering a caller through ``future``."""

    def __init__(self) -> None:
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()

    def complete(self, value: Any) -> None:
        if not self.future.done():
            self.future.set_result(value)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class ControlledShutdown(_WithFuture):
    """Result: ``(error_code, [remaining (topic, partition)])``."""

    state = "ControlledShutdown"

    def __init__(self, broker_id: int, broker_epoch: int) -> None:
        super().__init__()
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch

    def preempt(self) -> None:
        self.complete((ErrorCode.NOT_CONTROLLER, []))


class ReplicaLeaderElection(_WithFuture):
    """Result: ``{tp: (error_code, message | None)}`` (admin-triggered only)."""

    state = "ManualLeaderBalance"

    def __init__(self, partitions: set | None, election_type: int, trigger: str) -> None:
        super().__init__()
        self.partitions = partitions
        self.election_type = election_type
        self.trigger = trigger

    def preempt(self) -> None:
        self.complete({tp: (ErrorCode.NOT_CONTROLLER, None) for tp in self.partitions or ()})


class ApiPartitionReassignment(_WithFuture):
    """Result: ``(top-level error | None, {tp: (error_code, message | None)})``."""

    state = "AlterPartitionReassignment"

    def __init__(self, reassignments: dict) -> None:
        super().__init__()
        self.reassignments = reassignments

    def preempt(self) -> None:
        self.complete((ErrorCode.NOT_CONTROLLER, {}))


class ListPartitionReassignments(_WithFuture):
    """Result: ``(top-level error | None, {tp: ReplicaAssignment})``."""

    state = "ListPartitionReassignment"

    def __init__(self, partitions: set | None) -> None:
        super().__init__()
        self.partitions = partitions

    def preempt(self) -> None:
        self.complete((ErrorCode.NOT_CONTROLLER, {}))


class AlterPartitionReceived(_WithFuture):
    """Result: an ``AlterPartitionResponse``."""

    state = "IsrChange"

    def __init__(self, request: Any, version: int) -> None:
        super().__init__()
        self.request = request
        self.version = version

    def preempt(self) -> None:
        from protocol.messages import AlterPartitionResponse

        self.complete(AlterPartitionResponse(error_code=int(ErrorCode.NOT_CONTROLLER)))
