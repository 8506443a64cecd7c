"""How a coordinator answers a client when its append to an internal topic failed.

The group, transaction and share coordinators map the partition error of an acks=all append
to `__consumer_offsets`, `__transaction_state` or `__share_group_state` alike (Kafka's
GroupMetadataManager / TransactionStateManager / CoordinatorRuntime): the client looks the
coordinator up again (NOT_COORDINATOR) or retries it (COORDINATOR_NOT_AVAILABLE).
Size errors and anything else are each caller's own.
"""

from __future__ import annotations

from protocol.errors import ErrorCode

__all__ = ["COORDINATOR_APPEND_ERRORS"]

E = ErrorCode

COORDINATOR_APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
}
