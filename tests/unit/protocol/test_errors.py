"""protocol.errors: Kafka error codes, retriable flags, exception types."""

from __future__ import annotations

import pickle
import warnings

import pytest

from protocol.errors import (
    ErrorCode,
    FrameTooLargeError,
    InvalidFrameSizeError,
    InvalidLengthError,
    InvalidStringError,
    KafkaError,
    ProtocolError,
    TruncatedError,
    UnknownApiKeyError,
    UnsupportedVersionError,
    error_for,
)


def test_codes_are_contiguous_and_named_as_kafka():
    values = sorted(int(c) for c in ErrorCode)
    assert values == list(range(-1, 134))
    assert ErrorCode.NONE == 0
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.OFFSET_OUT_OF_RANGE == 1
    assert ErrorCode.CORRUPT_MESSAGE == 2
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.INVALID_REQUEST == 42
    assert ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert ErrorCode.FENCED_LEADER_EPOCH == 74
    assert ErrorCode.UNKNOWN_TOPIC_ID == 100
    assert ErrorCode.TRANSACTION_ABORTABLE == 120
    assert ErrorCode.SHARE_SESSION_LIMIT_REACHED == 133


def test_names_match_kafka_python_where_both_agree():
    # kafka-python uses Kafka's wire codes; a few names differ historically, compare codes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.errors as ke

    known = {c.errno for c in vars(ke).values()
             if isinstance(c, type) and issubclass(c, ke.BrokerResponseError)
             and getattr(c, "errno", None) is not None}
    assert known <= {int(c) for c in ErrorCode}


@pytest.mark.parametrize("code, retriable", [
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, True), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True),
    (ErrorCode.REQUEST_TIMED_OUT, True), (ErrorCode.NOT_COORDINATOR, True),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, True), (ErrorCode.NOT_ENOUGH_REPLICAS, True),
    (ErrorCode.CORRUPT_MESSAGE, True), (ErrorCode.KAFKA_STORAGE_ERROR, True),
    (ErrorCode.FENCED_LEADER_EPOCH, True), (ErrorCode.CONCURRENT_TRANSACTIONS, True),
    (ErrorCode.NONE, False), (ErrorCode.UNKNOWN_SERVER_ERROR, False),
    (ErrorCode.OFFSET_OUT_OF_RANGE, False), (ErrorCode.MESSAGE_TOO_LARGE, False),
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, False), (ErrorCode.INVALID_REQUEST, False),
    (ErrorCode.UNSUPPORTED_VERSION, False), (ErrorCode.PRODUCER_FENCED, False),
])
def test_retriable(code, retriable):
    assert code.retriable is retriable


def test_kafka_error():
    e = KafkaError(ErrorCode.NOT_COORDINATOR, "moved")
    assert e.code is ErrorCode.NOT_COORDINATOR and e.message == "moved"
    assert "NOT_COORDINATOR" in str(e) and "moved" in str(e)
    assert KafkaError(16).code is ErrorCode.NOT_COORDINATOR
    again = pickle.loads(pickle.dumps(e))
    assert (again.code, again.message) == (e.code, e.message)


def test_error_for():
    e = error_for(3, "no such topic")
    assert isinstance(e, KafkaError) and e.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_for(31999).code is ErrorCode.UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize("cls, code", [
    (TruncatedError, ErrorCode.CORRUPT_MESSAGE),
    (InvalidLengthError, ErrorCode.CORRUPT_MESSAGE),
    (InvalidStringError, ErrorCode.CORRUPT_MESSAGE),
    (UnsupportedVersionError, ErrorCode.UNSUPPORTED_VERSION),
    (UnknownApiKeyError, ErrorCode.INVALID_REQUEST),
    (FrameTooLargeError, ErrorCode.INVALID_REQUEST),
    (InvalidFrameSizeError, ErrorCode.INVALID_REQUEST),
])
def test_protocol_errors(cls, code):
    e = cls("bad input")
    assert isinstance(e, ProtocolError) and isinstance(e, KafkaError)
    assert e.code is code and e.message == "bad input"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is cls and again.code is code
