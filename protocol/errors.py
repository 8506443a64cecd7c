"""Kafka error codes and the exceptions the codec raises.

`ErrorCode` lists every error code of the Kafka protocol ("Error Codes" table of the Kafka
protocol guide, docs/protocol.html), -1 .. 133, with Kafka's names. `ErrorCode.retriable`
is True for the codes whose client exception is retriable in Kafka (RetriableException).

`KafkaError(code, message)` is the one exception type carrying a code; the request handlers
turn it into the response's error code. Malformed input raises a `ProtocolError` subclass:

    exception                code                   raised when
    TruncatedError           CORRUPT_MESSAGE        input ends before the value does
    InvalidLengthError       CORRUPT_MESSAGE        negative / oversized length or count
    InvalidStringError       CORRUPT_MESSAGE        string bytes are not valid UTF-8
    UnsupportedVersionError  UNSUPPORTED_VERSION    api version outside the valid range
    UnknownApiKeyError       INVALID_REQUEST        api key not in the protocol
    FrameTooLargeError       INVALID_REQUEST        frame size prefix > the configured max
    InvalidFrameSizeError    INVALID_REQUEST        frame size prefix < 0
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes (int16 on the wire)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    @property
    def retriable(self) -> bool:
        """True when Kafka marks the error retriable (the client may retry as is)."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    (
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
        ErrorCode.SHARE_SESSION_NOT_FOUND,
        ErrorCode.INVALID_SHARE_SESSION_EPOCH,
    )
)


class KafkaError(Exception):
    """An error with a Kafka error code: `KafkaError(ErrorCode.X, "message")`."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        self.code = _code(code)
        self.message = message
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class RecordValidationError(KafkaError):
    """Some records of a produce batch break a rule (KIP-467): `record_errors` is a list of
    `(batch_index, message)` - the index of the record in its batch - and the partition's
    `error_message` is Kafka's summary of at most the first three (LogValidator's
    processRecordErrors). The code is INVALID_TIMESTAMP if any record's timestamp is out of
    range, else INVALID_RECORD."""

    def __init__(self, record_errors: list[tuple[int, str]], timestamp: bool = False) -> None:
        self.record_errors = list(record_errors)
        if timestamp:
            code, message = (ErrorCode.INVALID_TIMESTAMP,
                             "One or more records have been rejected due to invalid timestamp")
        else:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                              for i, m in self.record_errors[:3])
            code = ErrorCode.INVALID_RECORD
            message = (f"One or more records have been rejected due to "
                       f"{len(self.record_errors)} record errors in total, and only showing "
                       f"the first three errors at most: [{shown}]")
        super().__init__(code, message)

    def __reduce__(self):
        return (type(self), (self.record_errors, self.code == ErrorCode.INVALID_TIMESTAMP))


def _code(code: ErrorCode | int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def error_for(code: ErrorCode | int, message: str | None = None) -> KafkaError:
    """Build the `KafkaError` for a wire error code (unknown codes -> UNKNOWN_SERVER_ERROR)."""
    return KafkaError(code, message)


class ProtocolError(KafkaError):
    """Malformed or unsupported protocol input. Subclasses fix the error code."""

    default_code = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str | None = None, code: ErrorCode | None = None) -> None:
        super().__init__(self.default_code if code is None else code, message)

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class TruncatedError(ProtocolError):
    """The input ended before the value being read (CORRUPT_MESSAGE)."""


class InvalidLengthError(ProtocolError):
    """A length or count is negative (where not null), runs past the end of the input, or is
    too large for the remaining bytes (CORRUPT_MESSAGE)."""


class InvalidStringError(ProtocolError):
    """String bytes are not valid UTF-8 (CORRUPT_MESSAGE)."""


class UnsupportedVersionError(ProtocolError):
    """The api version is outside the API's valid range (UNSUPPORTED_VERSION)."""

    default_code = ErrorCode.UNSUPPORTED_VERSION


class UnknownApiKeyError(ProtocolError):
    """The api key names no Kafka API (INVALID_REQUEST)."""

    default_code = ErrorCode.INVALID_REQUEST


class FrameTooLargeError(ProtocolError):
    """A frame size prefix exceeds the configured maximum (socket.request.max.bytes)
    (INVALID_REQUEST)."""

    default_code = ErrorCode.INVALID_REQUEST


class InvalidFrameSizeError(ProtocolError):
    """A frame size prefix is negative (INVALID_REQUEST)."""

    default_code = ErrorCode.INVALID_REQUEST
