"""Failed log dirs (KIP-112, issue 26): the LogManager's failure channel and the broker's
LogDirFailureHandler. The faults are real: a partition directory removed under the broker
(the roll that follows fails with ENOENT), a log dir path that is a file at startup."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil

import pytest

from broker.log_dir_failure import LogDirFailureHandler
from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import CLEAN_SHUTDOWN_FILE
from storage.config import LogConfig
from storage.log_manager import LogManager
from tests.unit.broker.dataplane_helpers import (
    BROKER_ID,
    FakeMetadataCache,
    MockTimer,
    batch,
    leader_and_isr,
)
from tests.unit.broker.test_replica_manager import consumer_fetch


def _rm(tmp_path, dirs):
    from broker.replica_manager import ReplicaManager

    lm = LogManager([str(tmp_path / d) for d in dirs], LogConfig(segment_bytes=4096))
    lm.load_all()
    rm = ReplicaManager(None, BROKER_ID, lm, FakeMetadataCache(()), MockTimer())
    return rm, lm


async def _settle():
    for _ in range(3):
        await asyncio.sleep(0)


def _break(lm, tp):
    """The partition's directory vanishes (a disk pulled): its next roll fails."""
    shutil.rmtree(lm.get_log(tp).dir)


async def test_failed_dir_goes_offline_once_and_its_partitions_answer_storage_errors(
        tmp_path, caplog):
    rm, lm = _rm(tmp_path, ["a", "b"])
    notified, fatal = [], []

    async def notify():
        notified.append(1)
    handler = LogDirFailureHandler(rm, lm, notify, lambda: fatal.append(1))
    handler.start()
    await rm.become_leader_or_follower(leader_and_isr(partitions=(0, 1)))
    dirs = {tp: lm.log_dir_of(tp) for tp in (("t", 0), ("t", 1))}
    assert len(set(dirs.values())) == 2  # one partition per dir
    bad = dirs[("t", 0)]
    for tp in dirs:
        assert rm.append_records(1000, 1, {tp: batch(1)})[tp].error == ErrorCode.NONE
    _break(lm, ("t", 0))
    caplog.set_level(logging.WARNING)
    errors = []
    for _ in range(40):  # enough bytes to roll the 4 KiB segment
        errors.append(rm.append_records(1000, 1, {("t", 0): batch(1, value=b"x" * 400)})
                      [("t", 0)].error)
    await _settle()
    assert ErrorCode.KAFKA_STORAGE_ERROR in errors
    assert set(errors) <= {ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR}
    assert lm.failure_channel.offline_dirs() == [bad] and lm.live_log_dirs == [dirs[("t", 1)]]
    assert rm.offline_partitions == {("t", 0)} and rm.get_partition("t", 0) is None
    assert notified == [1] and not fatal
    # one ERROR line for the dir, whatever the number of failed appends
    assert [r.levelname for r in caplog.records].count("ERROR") == 1
    # the offline partition answers KAFKA_STORAGE_ERROR everywhere, the other one works
    assert rm.append_records(1000, 1, {("t", 0): batch(1)})[("t", 0)].error == \
        ErrorCode.KAFKA_STORAGE_ERROR
    assert rm.append_records(1000, 1, {("t", 1): batch(1)})[("t", 1)].error == ErrorCode.NONE
    fetched = consumer_fetch(rm, [(("t", 0), 0)])
    assert fetched[("t", 0)].error == ErrorCode.KAFKA_STORAGE_ERROR
    res = await rm.become_leader_or_follower(leader_and_isr(partitions=(0, 1), leader_epoch=1))
    assert res == {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR, ("t", 1): ErrorCode.NONE}
    # new partitions go to the live dir; one that is not new may be in the failed dir
    res = await rm.become_leader_or_follower(leader_and_isr(partitions=(2,)))
    assert res[("t", 2)] == ErrorCode.NONE and lm.log_dir_of(("t", 2)) == dirs[("t", 1)]
    old = leader_and_isr(partitions=(3,))
    old.topic_states[0].partition_states[0].is_new = False
    assert (await rm.become_leader_or_follower(old))[("t", 3)] == ErrorCode.KAFKA_STORAGE_ERROR
    # the failed dir gets no checkpoints and no clean shutdown marker
    await rm.shutdown()
    lm.close_all()
    assert not os.path.exists(os.path.join(bad, CLEAN_SHUTDOWN_FILE))
    assert os.path.exists(os.path.join(dirs[("t", 1)], CLEAN_SHUTDOWN_FILE))
    assert not [n for n in os.listdir(bad) if n.endswith(".tmp")]


async def test_every_dir_failed_stops_the_broker_with_one_line(tmp_path, caplog):
    rm, lm = _rm(tmp_path, ["a"])
    fatal = []
    handler = LogDirFailureHandler(rm, lm, None, lambda: fatal.append(1))
    handler.start()
    await rm.become_leader_or_follower(leader_and_isr(partitions=(0,)))
    _break(lm, ("t", 0))
    caplog.set_level(logging.WARNING)
    for _ in range(40):
        rm.append_records(1000, 1, {("t", 0): batch(1, value=b"x" * 400)})
    await _settle()
    assert fatal == [1]
    critical = [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"]
    assert critical == [f"Shutdown broker because all log dirs in {lm.log_dirs[0]} have failed"]
    with pytest.raises(KafkaError) as e:
        lm.get_or_create_log(("u", 0))
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    await rm.shutdown()
    lm.close_all()


def test_a_dir_that_cannot_be_loaded_starts_offline(tmp_path):
    (tmp_path / "bad").write_text("not a directory")
    good = tmp_path / "good"
    good.mkdir()
    (good / "recovery-point-offset-checkpoint.tmp").write_text("torn")
    lm = LogManager([str(tmp_path / "bad"), str(good)], LogConfig())
    lm.load_all()
    assert lm.failure_channel.offline_dirs() == [str(tmp_path / "bad")]
    assert lm.live_log_dirs == [str(good)]
    assert not (good / "recovery-point-offset-checkpoint.tmp").exists()  # cleaned at startup
    lm.get_or_create_log(("t", 0))
    assert lm.log_dir_of(("t", 0)) == str(good)
    lm.close_all()
    with pytest.raises(KafkaError) as e:
        LogManager([str(tmp_path / "bad")], LogConfig()).load_all()
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_resource_limits_do_not_take_a_dir_offline(tmp_path):
    import errno

    lm = LogManager([str(tmp_path / "a")], LogConfig())
    lm.load_all()
    err = lm.io_error(lm.log_dirs[0], "opening a segment", OSError(errno.EMFILE, "Too many"))
    assert err.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert lm.live_log_dirs == lm.log_dirs
    lm.close_all()
