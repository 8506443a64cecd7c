"""Exactly-once consume-transform-produce on one broker (issue 14): a confluent-kafka worker
(tests/integration/eos_pipeline.py) reads an input topic read_committed, writes one output
record per input inside transactions and sends its consumer offsets to the transaction
(AddOffsetsToTxn + TxnOffsetCommit, KIP-447 static member). It is SIGKILLed twice in the
middle of the run and restarted with the same transactional id, which fences and aborts
the dead instance's open transaction; the restarted worker resumes from the committed
offsets (OffsetFetch with require_stable waits out the pending transactional commit). Every
input record's output appears exactly once in the read_committed view.

The long schedule: ``python -m tests.integration.eos_pipeline --soak HOST:PORT 20000 10``
against a running broker.
"""

from __future__ import annotations

import signal

import pytest

from tests.integration.eos_pipeline import (
    check_exactly_once,
    produce_input,
    read_output,
    start_worker,
    stop_worker,
    wait_committed,
)
from tests.integration.test_transactions import BROKER_PROPS, create_topics

pytestmark = pytest.mark.integration
RECORDS = 300


def test_consume_transform_produce_survives_killed_workers(broker_factory):
    b = broker_factory({**BROKER_PROPS, "group.min.session.timeout.ms": "1000"})
    bs = b.bootstrap
    create_topics(bs, ("eos-in", 2), ("eos-out", 2))
    produce_input(bs, "eos-in", RECORDS)
    for at_least in (60, 40):
        w = start_worker(bs, "eos-group", "eos-tx", "eos-in", "eos-out", batch=15)
        try:
            wait_committed(w, at_least)
        finally:
            stop_worker(w, signal.SIGKILL)
    w = start_worker(bs, "eos-group", "eos-tx", "eos-in", "eos-out", batch=15)
    try:
        check_exactly_once(read_output(bs, "eos-out", RECORDS), RECORDS)
    finally:
        stop_worker(w)
