"""Produce with flush.messages reached: the answer follows the fsync (Kafka fsyncs inside
the append), and a failed fsync answers KAFKA_STORAGE_ERROR for its partition."""

from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest

from broker.purgatory import MockTimer
from broker.replica_manager import ReplicaManager
from protocol.errors import ErrorCode
from storage.config import LogConfig
from storage.log_manager import LogManager
from tests.unit.broker.dataplane_helpers import (
    BROKER_ID,
    FakeMetadataCache,
    ManualClock,
    batch,
    leader_and_isr,
)

TP = ("t", 0)
OTHER = ("u", 0)  # flush.messages left at its default: never flushed by an append


@pytest.fixture
async def rm(tmp_path):
    clock = ManualClock()
    lm = LogManager([str(tmp_path / "logs")], LogConfig(flush_interval_messages=1),
                    time_ms=clock)
    await lm.startup(background=False)  # the executor flush hook needs the running loop
    rm = ReplicaManager(None, BROKER_ID, lm, FakeMetadataCache(), MockTimer(), time_ms=clock)
    rm.on_topic_config_change("u", {"flush.messages": str(2**63 - 1)})
    await rm.become_leader_or_follower(leader_and_isr())
    await rm.become_leader_or_follower(leader_and_isr(topic="u"))
    yield rm
    await rm.shutdown()
    await lm.shutdown()


class GatedFsync:
    """Wraps the real os.fsync of one log's `.log` file: blocks its executor thread until
    `release` is set, then fsyncs (or raises `error`). Other fds pass straight through."""

    def __init__(self, log_path: str, error: OSError | None = None) -> None:
        self.real = os.fsync
        self.log_path = log_path
        self.error = error
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def __call__(self, fd) -> None:
        try:
            target = os.readlink(f"/proc/self/fd/{int(fd)}")
        except OSError:
            target = ""
        if not target.startswith(self.log_path) or not target.endswith(".log"):
            return self.real(fd)
        self.entered.set()
        self.release.wait(10)
        try:
            if self.error is not None:
                raise self.error
            return self.real(fd)
        finally:
            self.finished.set()


async def _wait_thread_event(ev: threading.Event) -> None:
    ok = await asyncio.get_running_loop().run_in_executor(None, ev.wait, 5)
    assert ok, "the fsync never started"


@pytest.mark.parametrize("acks", [1, -1])
async def test_answer_waits_for_the_fsync(rm, monkeypatch, acks):
    plog = rm.get_partition(*TP).log
    gate = GatedFsync(plog.dir)
    monkeypatch.setattr(os, "fsync", gate)
    try:
        res = rm.append_records(1000, acks, {TP: batch(3)})
        assert isinstance(res, asyncio.Future)
        await _wait_thread_event(gate.entered)
        await asyncio.sleep(0.02)
        assert not res.done(), "answered before the fsync ran"
        assert plog.recovery_point == 0
    finally:
        gate.release.set()
    out = await asyncio.wait_for(res, 5)
    assert gate.finished.is_set()
    assert out[TP].error == ErrorCode.NONE
    assert (out[TP].base_offset, out[TP].last_offset) == (0, 2)
    assert plog.recovery_point == 3  # the fsync ran before the answer


async def test_fsync_error_is_kafka_storage_error_for_that_partition(rm, monkeypatch):
    plog = rm.get_partition(*TP).log
    gate = GatedFsync(plog.dir, OSError(errno.EIO, "I/O error"))
    gate.release.set()
    monkeypatch.setattr(os, "fsync", gate)
    res = rm.append_records(1000, 1, {TP: batch(2), OTHER: batch(1)})
    assert isinstance(res, asyncio.Future)
    out = await asyncio.wait_for(res, 5)
    monkeypatch.undo()
    assert gate.finished.is_set()
    assert out[TP].error == ErrorCode.KAFKA_STORAGE_ERROR
    assert "I/O error" in out[TP].error_message
    assert out[OTHER].error == ErrorCode.NONE and out[OTHER].base_offset == 0
    assert list(out) == [TP, OTHER]  # request order kept
    assert plog.recovery_point == 0


async def test_no_flush_answers_at_once(rm):
    res = rm.append_records(1000, 1, {OTHER: batch(2)})
    assert isinstance(res, dict) and res[OTHER].error == ErrorCode.NONE
    res = rm.append_records(1000, -1, {OTHER: batch(2)})
    assert isinstance(res, dict) and res[OTHER].base_offset == 2


async def test_acks0_does_not_wait(rm, monkeypatch):
    plog = rm.get_partition(*TP).log
    gate = GatedFsync(plog.dir)
    monkeypatch.setattr(os, "fsync", gate)
    try:
        res = rm.append_records(1000, 0, {TP: batch(1)})
        assert isinstance(res, dict) and res[TP].error == ErrorCode.NONE
    finally:
        gate.release.set()
    await _wait_thread_event(gate.finished)
