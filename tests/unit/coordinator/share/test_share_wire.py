"""The *ShareGroupState RPCs <-> persister dataclasses, through the codec's bytes, with
Josef's dead-letter extension in its tagged field."""

from __future__ import annotations

import uuid

from coordinator.share import wire
from coordinator.share.persister import (
    ReadStateRequest,
    ReadStateResult,
    ReadStateSummaryResult,
    WriteStateRequest,
)
from coordinator.share.state import DeadLetterIntent, StateBatch
from protocol.api import decode_request, decode_response, encode_request, encode_response

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def roundtrip_request(api_key, msg):
    return decode_request(api_key, 0, encode_request(msg, 0))


def roundtrip_response(api_key, msg):
    return decode_response(api_key, 0, encode_response(msg, 0))


def test_write_request_carries_the_dead_letter_extension():
    reqs = [WriteStateRequest("g", T1, 0, 2, 5, 10, (StateBatch(10, 12, 4, 3),),
                              (DeadLetterIntent(7, 11, 3, 1),), (5, 6), (900, 0)),
            WriteStateRequest("g", T1, 1, 2, 5, -1),
            WriteStateRequest("g", T2, 0, 0, 1, 3, (StateBatch(3, 3, 2, 1),))]
    back = wire.write_requests(roundtrip_request(wire.WRITE, wire.write_rpc("g", reqs)))
    assert back == reqs


def test_read_and_summary_results_round_trip():
    req = ReadStateRequest("g", T2, 4, 9)
    assert wire.read_requests(roundtrip_request(wire.READ, wire.read_rpc("g", [req]))) == [req]
    res = ReadStateResult(0, None, 3, 100, (StateBatch(100, 104, 0, 2),),
                          (DeadLetterIntent(2, 101, 5, 2),), 3, (42, 1))
    resp = roundtrip_response(wire.READ, wire.read_response([(T2, 4, res)]))
    assert wire.read_results(resp) == {(T2, 4): res}
    plain = ReadStateResult(0, None, 1, -1)
    resp = roundtrip_response(wire.READ, wire.read_response([(T2, 5, plain)]))
    assert wire.read_results(resp)[(T2, 5)] == plain
    summary = ReadStateSummaryResult(0, None, 2, 7, 55)
    resp = roundtrip_response(wire.READ_SUMMARY, wire.summary_response([(T1, 0, summary)]))
    assert wire.summary_results(resp) == {(T1, 0): summary}


def test_codes_responses():
    resp = roundtrip_response(wire.WRITE, wire.codes_response(
        wire.WRITE, [(T1, 0, 0, None), (T1, 1, 124, "fenced"), (T2, 0, 16, None)]))
    assert wire.partition_results(resp) == {(T1, 0): (0, None), (T1, 1): (124, "fenced"),
                                            (T2, 0): (16, None)}
