import asyncio
import dataclasses
import os

import pytest

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import OffsetCheckpointFile
from storage.config import LogConfig
from storage.log_manager import LogManager

from .conftest import build_batch

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=300, segment_index_bytes=4096,
                file_delete_delay_ms=10)


async def test_placement_checkpoints_and_clean_restart(tmp_path, clock):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    mgr = LogManager(dirs, CFG, broker_id=1, cluster_id="c1", time_ms=clock)
    await mgr.startup(background=False)
    for d in dirs:
        with open(os.path.join(d, "meta.properties")) as f:
            assert "broker.id=1" in f.read()
    logs = {p: mgr.get_or_create_log(("orders", p)) for p in range(4)}
    assert mgr.get_or_create_log(("orders", 0)) is logs[0]
    placed = [mgr.log_dir_of(("orders", p)) for p in range(4)]
    assert placed.count(dirs[0]) == 2 and placed.count(dirs[1]) == 2
    for p, log in logs.items():
        for _ in range(10 * (p + 1)):
            log.append_as_leader(build_batch(n=2), 0)
        log.high_watermark = log.log_end_offset - 1
    await mgr.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
        rp = OffsetCheckpointFile(os.path.join(d, "recovery-point-offset-checkpoint")).read()
        hw = OffsetCheckpointFile(os.path.join(d, "replication-offset-checkpoint")).read()
        for (t, p), off in rp.items():
            assert t == "orders" and off == 20 * (p + 1) and hw[(t, p)] == off - 1
    mgr = LogManager(dirs, CFG, broker_id=1, cluster_id="c1", time_ms=clock)
    await mgr.startup(background=False)
    assert all(mgr.had_clean_shutdown.values())
    assert not any(os.path.exists(os.path.join(d, ".kafka_cleanshutdown")) for d in dirs)
    assert {tp: lg.log_end_offset for tp, lg in mgr.all_logs().items()} == {
        ("orders", p): 20 * (p + 1) for p in range(4)}
    assert mgr.get_log(("orders", 3)).high_watermark == 79
    await mgr.shutdown()


async def test_meta_properties_mismatch(tmp_path):
    mgr = LogManager([str(tmp_path)], CFG, broker_id=1, cluster_id="c1")
    await mgr.startup(background=False)
    await mgr.shutdown()
    with pytest.raises(KafkaError) as e:
        await LogManager([str(tmp_path)], CFG, broker_id=1, cluster_id="other").startup()
    assert e.value.code == ErrorCode.INCONSISTENT_CLUSTER_ID
    with pytest.raises(KafkaError):
        await LogManager([str(tmp_path)], CFG, broker_id=2, cluster_id="c1").startup()


async def test_delete_renames_then_removes(tmp_path):
    mgr = LogManager([str(tmp_path)], CFG)
    await mgr.startup(background=False)
    log = mgr.get_or_create_log(("my.topic", 2))
    log.append_as_leader(build_batch(), 0)
    in_flight = log.read(0, 1 << 20).records
    assert mgr.delete_log(("my.topic", 2))
    assert len(in_flight.read_bytes()) == len(in_flight)  # still valid until the delay passes
    assert not mgr.delete_log(("my.topic", 2))
    assert mgr.get_log(("my.topic", 2)) is None
    left = [n for n in os.listdir(tmp_path) if n.startswith("my.topic-2")]
    assert len(left) == 1 and left[0].endswith("-delete") and len(left[0]) == len(
        "my.topic-2.") + 32 + len("-delete")
    for _ in range(100):
        await asyncio.sleep(0.01)
        if not os.path.exists(tmp_path / left[0]):
            break
    assert not os.path.exists(tmp_path / left[0])
    await mgr.shutdown()


async def test_roll_flushes_in_executor_and_retention_runs_on_loop(tmp_path, clock):
    cfg = dataclasses.replace(CFG, retention_ms=60_000)
    mgr = LogManager([str(tmp_path)], cfg, time_ms=clock)
    await mgr.startup(background=False)
    log = mgr.get_or_create_log(("t", 0), cfg)
    for i in range(60):
        log.append_as_leader(build_batch(n=2, ts=clock.now + i), 0)
    assert log.num_segments > 3
    await asyncio.gather(*list(mgr._pending))
    assert log.recovery_point == log.active_segment.base_offset  # flushed up to the roll
    log.high_watermark = log.log_end_offset
    assert await mgr.cleanup_logs() == 0
    clock.advance(120_000)
    deleted = await mgr.cleanup_logs()
    assert deleted > 0 and log.num_segments == 1
    assert log.log_start_offset == log.active_segment.base_offset
    await mgr.shutdown()
    starts = OffsetCheckpointFile(str(tmp_path / "log-start-offset-checkpoint")).read()
    assert starts[("t", 0)] == log.log_start_offset


async def test_background_tasks_flush_by_time(tmp_path, clock):
    cfg = dataclasses.replace(CFG, flush_interval_ms=1000)
    mgr = LogManager([str(tmp_path)], cfg, time_ms=clock, flush_check_interval_ms=5,
                     recovery_point_checkpoint_interval_ms=5)
    await mgr.startup()
    log = mgr.get_or_create_log(("t", 0), cfg)
    log.append_as_leader(build_batch(), 0)
    await asyncio.sleep(0.05)
    assert log.recovery_point == 0  # flush.ms not reached yet (manual clock)
    clock.advance(1000)
    for _ in range(100):
        await asyncio.sleep(0.01)
        cp = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint")).read()
        if cp.get(("t", 0)) == 3:
            break
    assert log.recovery_point == 3 and cp[("t", 0)] == 3
    await mgr.shutdown()


async def test_flush_messages_flushes_off_the_loop(tmp_path, clock):
    cfg = dataclasses.replace(CFG, flush_interval_messages=6)
    mgr = LogManager([str(tmp_path)], cfg, time_ms=clock)
    await mgr.startup(background=False)
    log = mgr.get_or_create_log(("t", 0), cfg)
    log.append_as_leader(build_batch(n=3), 0)
    assert not mgr._pending and log.recovery_point == 0
    log.append_as_leader(build_batch(n=3), 0)
    assert mgr._pending  # the fsync runs in the executor, not in append_as_leader
    await asyncio.gather(*list(mgr._pending))
    assert log.recovery_point == 6
    await mgr.shutdown()


async def test_retention_deletes_after_the_topics_file_delete_delay(tmp_path, clock):
    """Segments removed by retention wait for the *topic's* file.delete.delay.ms (here 10 ms
    against a 60 s broker default), read at deletion time so live config changes count."""
    default = dataclasses.replace(CFG, file_delete_delay_ms=60_000, retention_ms=60_000)
    topic_cfg = dataclasses.replace(default, file_delete_delay_ms=10)
    mgr = LogManager([str(tmp_path)], default, time_ms=clock)
    await mgr.startup(background=False)
    log = mgr.get_or_create_log(("t", 0), topic_cfg)
    slow = mgr.get_or_create_log(("slow", 0))  # broker default: 60 s
    for lg in (log, slow):
        for i in range(40):
            lg.append_as_leader(build_batch(n=2, ts=clock.now + i), 0)
        lg.high_watermark = lg.log_end_offset
    await asyncio.gather(*list(mgr._pending))
    clock.advance(120_000)
    assert await mgr.cleanup_logs() > 0

    def deleted(name):
        return [n for n in os.listdir(tmp_path / name) if n.endswith(".deleted")]
    assert deleted("t-0") and deleted("slow-0")
    for _ in range(100):
        await asyncio.sleep(0.01)
        if not deleted("t-0"):
            break
    assert not deleted("t-0")  # the topic's 10 ms, not the default's 60 s
    assert deleted("slow-0")
    await mgr.shutdown()


async def test_in_flight_slices_survive_delete_log_and_retention_until_the_delay(tmp_path,
                                                                                 clock):
    """A Fetch response still being sent holds FileRecords slices: after delete_log (and
    after retention drops the segment) they stay sendfile-able until file.delete.delay.ms
    (Kafka's file.delete.delay.ms); only then are the descriptors closed, in the executor."""
    import socket
    cfg = dataclasses.replace(CFG, file_delete_delay_ms=200, retention_ms=60_000)
    mgr = LogManager([str(tmp_path)], cfg, time_ms=clock)
    await mgr.startup(background=False)
    gone = mgr.get_or_create_log(("gone", 0), cfg)
    kept = mgr.get_or_create_log(("kept", 0), cfg)
    for lg in (gone, kept):
        for i in range(40):
            lg.append_as_leader(build_batch(n=2, ts=clock.now + i), 0)
        lg.high_watermark = lg.log_end_offset
    await asyncio.gather(*list(mgr._pending))
    whole = gone.read(0, 1 << 20).records
    expected = whole.read_bytes()
    first_seg = kept.read(0, 1 << 20).records  # slice of kept's oldest segment
    first_bytes = first_seg.read_bytes()
    assert mgr.delete_log(("gone", 0))
    clock.advance(120_000)
    assert await mgr.cleanup_logs() > 0 and kept.log_start_offset > 0
    await asyncio.sleep(0.05)  # loop turns pass; the delay has not

    def sendfile_all(records):
        a, b = socket.socketpair()
        try:
            for f, pos, length in records.slices:
                sent = 0
                while sent < length:
                    sent += os.sendfile(a.fileno(), f.fileno(), pos + sent, length - sent)
            a.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := b.recv(1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            a.close()
            b.close()
    assert sendfile_all(whole) == expected and sendfile_all(first_seg) == first_bytes
    for _ in range(200):
        await asyncio.sleep(0.01)
        if all(f.closed for f, _, _ in whole.slices + first_seg.slices):
            break
    assert all(f.closed for f, _, _ in whole.slices + first_seg.slices)
    await asyncio.gather(*list(mgr._pending))  # the rmtree after the close
    assert not [n for n in os.listdir(tmp_path) if n.startswith("gone-0")]
    await mgr.shutdown()


def test_concurrent_checkpoint_writes_do_not_collide(tmp_path):
    """The periodic checkpoint job runs in an executor thread and may still be running when
    shutdown writes the same file: writers must not share the `.tmp` file mid-write."""
    from concurrent.futures import ThreadPoolExecutor
    mgr = LogManager([str(tmp_path)], CFG)
    mgr.load_all()
    mgr.get_or_create_log(("t", 0)).append_as_leader(build_batch(), 0)
    with ThreadPoolExecutor(8) as ex:
        for f in [ex.submit(mgr.checkpoint_recovery_points) for _ in range(400)]:
            f.result()
    mgr.close_all()
    assert OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint")).read() == {
        ("t", 0): 3}


async def test_shutdown_waits_for_a_running_background_checkpoint(tmp_path):
    """A periodic checkpoint already in its executor thread when shutdown cancels its task
    finishes before `close_all` starts (else its older values could land last)."""
    mgr = LogManager([str(tmp_path)], CFG)
    await mgr.startup(background=False)
    log = mgr.get_or_create_log(("t", 0))
    log.append_as_leader(build_batch(), 0)
    mgr._checkpoint_lock.acquire()  # hold the job inside its thread
    job = asyncio.create_task(mgr.checkpoint_recovery_points_async())
    await asyncio.sleep(0.05)
    job.cancel()
    stopping = asyncio.create_task(mgr.shutdown())
    await asyncio.sleep(0.1)
    started_close_all = log.recovery_point == 3  # close_all flushes before checkpointing
    mgr._checkpoint_lock.release()
    await stopping
    assert not started_close_all
    assert OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint")).read() == {
        ("t", 0): 3}


class _ThreadRecordingLog:
    """Wraps Log.flush to record which thread ran each fsync pass."""

    @staticmethod
    def install(log):
        import threading
        threads = []
        real = log.flush

        def flush(offset=None):
            threads.append(threading.get_ident())
            real(offset)
        log.flush = flush
        return threads


async def test_flush_messages_without_manager_fsyncs_off_the_loop(make_log):
    """flush.messages=1 on a bare Log used from an event loop: the fsync runs in an executor
    thread, and the append hands back `flush_future` to hold the acknowledgement on."""
    import threading
    cfg = dataclasses.replace(CFG, flush_interval_messages=1)
    log = make_log(cfg, name="t-0")
    threads = _ThreadRecordingLog.install(log)
    info = log.append_as_leader(build_batch(n=2), 0)
    assert info.flush_future is not None
    await info.flush_future
    assert threads and threading.get_ident() not in threads  # never on the loop's thread
    assert log.recovery_point == 2


async def test_flush_messages_append_returns_a_future_for_the_ack(tmp_path, clock):
    """Kafka flushes inside the append when flush.messages is reached, so the produce
    response follows the fsync; here the append returns at once with `flush_future`, done
    once the log is durable up to that append (recovery point >= its last offset + 1)."""
    cfg = dataclasses.replace(CFG, flush_interval_messages=4)
    mgr = LogManager([str(tmp_path)], cfg, time_ms=clock)
    await mgr.startup(background=False)
    log = mgr.get_or_create_log(("t", 0), cfg)
    first = log.append_as_leader(build_batch(n=3), 0)
    assert first.flush_future is None  # below flush.messages: nothing to wait for
    second = log.append_as_leader(build_batch(n=3), 0)
    assert second.flush_future is not None
    await second.flush_future
    assert log.recovery_point >= second.last_offset + 1
    await mgr.shutdown()


async def test_flush_messages_counts_appends_made_while_a_flush_runs(tmp_path, clock):
    """Kafka's unflushed count is LEO - recovery point: appends made while a scheduled flush
    runs in the executor still count towards the next flush.messages trigger."""
    cfg = dataclasses.replace(CFG, flush_interval_messages=4)
    mgr = LogManager([str(tmp_path)], cfg, time_ms=clock)
    await mgr.startup(background=False)
    log = mgr.get_or_create_log(("t", 0), cfg)
    first = log.append_as_leader(build_batch(n=4), 0)  # offsets 0-3: flush scheduled
    assert first.flush_future is not None
    for _ in range(3):  # offsets 4-6, appended before that flush has run
        assert log.append_as_leader(build_batch(n=1), 0).flush_future is None
    await first.flush_future
    assert log.recovery_point == 4
    fourth = log.append_as_leader(build_batch(n=1), 0)  # offset 7: 4 unflushed again
    assert fourth.flush_future is not None
    await fourth.flush_future
    assert log.recovery_point == 8
    await mgr.shutdown()


async def test_high_watermarks_checkpointed_periodically(tmp_path, clock):
    """replica.high.watermark.checkpoint.interval.ms: the HW survives a crash (no clean
    shutdown) up to the last periodic checkpoint."""
    mgr = LogManager([str(tmp_path)], CFG, time_ms=clock,
                     replication_checkpoint_interval_ms=5)
    await mgr.startup()
    log = mgr.get_or_create_log(("t", 0))
    log.append_as_leader(build_batch(n=3), 0)
    log.high_watermark = 3
    path = str(tmp_path / "replication-offset-checkpoint")
    for _ in range(100):
        await asyncio.sleep(0.01)
        if os.path.exists(path) and OffsetCheckpointFile(path).read().get(("t", 0)) == 3:
            break
    assert OffsetCheckpointFile(path).read() == {("t", 0): 3}
    await mgr.shutdown()


def _manager_with_log(tmp_path, batches: int, hw: int):
    """A loaded LogManager with log ("t", 0) of `batches` batches, its HW at `hw`."""
    mgr = LogManager([str(tmp_path)], CFG)
    mgr.load_all()
    log = mgr.get_or_create_log(("t", 0))
    for _ in range(batches):
        log.append_as_leader(build_batch(), 0)
    log.high_watermark = hw
    return mgr, log


def test_high_watermark_checkpoint_skips_nothing_that_changed(tmp_path):
    """The periodic high-watermark checkpoint gathers nothing while no HW, log or live dir
    changed (issue 22), yet every change lands in the file at the next pass: a moved HW, a
    new log, a deleted log."""
    path = str(tmp_path / "replication-offset-checkpoint")
    mgr, a = _manager_with_log(tmp_path, batches=3, hw=3)
    mgr.checkpoint_replication_offsets()
    assert OffsetCheckpointFile(path).read() == {("t", 0): 3}
    os.unlink(path)  # unchanged: not gathered, so not rewritten either
    mgr.checkpoint_replication_offsets()
    assert not os.path.exists(path)
    a.high_watermark = 6
    mgr.checkpoint_replication_offsets()
    assert OffsetCheckpointFile(path).read() == {("t", 0): 6}
    b = mgr.get_or_create_log(("t", 1))
    mgr.checkpoint_replication_offsets()
    assert OffsetCheckpointFile(path).read() == {("t", 0): 6, ("t", 1): 0}
    b.append_as_leader(build_batch(), 0)
    b.high_watermark = 3
    mgr.checkpoint_replication_offsets()
    assert OffsetCheckpointFile(path).read() == {("t", 0): 6, ("t", 1): 3}
    assert mgr.delete_log(("t", 0))
    mgr.checkpoint_replication_offsets()
    assert OffsetCheckpointFile(path).read() == {("t", 1): 3}
    mgr.close_all()


def test_recovery_point_and_log_start_checkpoints_follow_every_change(tmp_path):
    """The 60 s recovery-point and log-start checkpoints skip gathering while nothing moved
    (issue 22); a flush, a DeleteRecords, a truncation and a new log all land next time."""
    rp_path = str(tmp_path / "recovery-point-offset-checkpoint")
    ls_path = str(tmp_path / "log-start-offset-checkpoint")
    mgr, a = _manager_with_log(tmp_path, batches=4, hw=12)

    def both():
        mgr.checkpoint_recovery_points()
        mgr.checkpoint_log_start_offsets()
        return OffsetCheckpointFile(rp_path).read(), OffsetCheckpointFile(ls_path).read()

    assert both() == ({("t", 0): 0}, {("t", 0): 0})
    os.unlink(rp_path)
    mgr.checkpoint_recovery_points()
    assert not os.path.exists(rp_path)  # unchanged: not gathered, not rewritten
    a.flush()
    assert both() == ({("t", 0): 12}, {("t", 0): 0})
    a.delete_records_before(6)
    assert both() == ({("t", 0): 12}, {("t", 0): 6})
    a.truncate_to(9)
    assert both()[0] == {("t", 0): 9}
    mgr.get_or_create_log(("t", 1))
    assert both() == ({("t", 0): 9, ("t", 1): 0}, {("t", 0): 6, ("t", 1): 0})
    mgr.close_all()
