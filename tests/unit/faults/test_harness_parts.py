"""Pieces of the fault harness that need no cluster: the nemesis schedule drawn from the
seed, torn writes that the broker's log recovery must cut off, the fuzz frame generator
against the project's codec, and the cleanup of a crashed run from its state file."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from protocol.api import API_KEYS
from protocol.record_builder import RecordBatchBuilder
from protocol.records import iter_batches
from storage.config import LogConfig
from storage.log_manager import LogManager
from tests.faults import nemesis as nem
from tests.faults.fuzzgen import RISKY_MUTATIONS, SAFE_MUTATIONS, FrameGenerator, valid_body
from tests.faults.state import RunState, process_start_time, sweep


def test_plan_is_a_function_of_the_seed_and_fits_the_time_limit():
    a = nem.plan(["kill", "pause", "partition", "zk", "torn"], 300, 7, 3, 3, True)
    b = nem.plan(["kill", "pause", "partition", "zk", "torn"], 300, 7, 3, 3, True)
    c = nem.plan(["kill", "pause", "partition", "zk", "torn"], 300, 8, 3, 3, True)
    assert a == b and a != c
    assert {f.kind for f in a} == {"kill", "pause", "partition", "zk", "torn"}
    for x, y in zip(a, a[1:], strict=False):
        assert x.at + x.duration < y.at  # one fault at a time
    assert a[-1].at + a[-1].duration <= 295
    assert all(7 <= f.duration <= 12 for f in a if f.kind == "pause")  # > 6 s sessions
    single = nem.plan(["kill", "pause", "torn"], 120, 1, 1, 3, False)
    assert {f.variant for f in single if f.kind == "kill"} <= {"leader", "random"}


def test_applicable_refuses_what_the_cluster_cannot_do():
    assert nem.applicable(["kill", "pause", "torn"], 1, False, False) == []
    assert nem.applicable(["partition"], 1, False, False)
    assert nem.applicable(["zk"], 1, False, True)
    assert nem.applicable(["bogus"], 3, True, True)
    assert nem.applicable(["kill", "pause", "partition", "zk", "torn"], 3, True, True) == []


@pytest.mark.parametrize("seed", range(12))
def test_torn_tail_is_cut_by_log_recovery(tmp_path, seed):
    """Every tear variant (partial batch, bad CRC, garbage) leaves the log that recovery
    restores: exactly the batches written before."""
    cfg = LogConfig(segment_bytes=1 << 20)
    mgr = LogManager([str(tmp_path)], cfg)
    mgr.load_all()
    log = mgr.get_or_create_log(("t", 0))
    for n in range(20):
        b = RecordBatchBuilder(compression_type=n % 3)
        for i in range(1 + n % 4):
            b.append(1_700_000_000_000 + i, None, f"v{n}-{i}".encode() * 3)
        log.append_as_leader(bytearray(b.build()), leader_epoch=0)
    end = log.log_end_offset
    log.flush()
    segment = next((tmp_path / "t-0").glob("*.log"))
    size = segment.stat().st_size
    log.close()  # like a SIGKILL: no clean-shutdown marker, no checkpoints
    detail = nem.tear(segment, random.Random(seed))
    assert segment.stat().st_size == size + detail["bytes"]
    mgr = LogManager([str(tmp_path)], cfg)  # no clean-shutdown marker: recovery runs
    mgr.load_all()
    log = mgr.get_log(("t", 0))
    assert log.log_end_offset == end, detail
    assert segment.stat().st_size == size
    assert sum(1 for _ in iter_batches(segment.read_bytes())) == 20
    log.close()


def test_generated_bodies_decode_with_the_codec_for_every_api_version():
    """The fuzzer writes requests itself; unmutated ones must be what the codec reads."""
    rng = random.Random(5)
    for key, spec in sorted(API_KEYS.items()):
        for v in range(spec.min_version, spec.max_version + 1):
            for _ in range(3):
                body = valid_body(rng, key, v)
                _, end = spec.request_cls.decode_from(bytes(body.data), v)
                assert end == len(body.data), (spec.name, v)


def test_frame_generator_is_deterministic_and_mutates():
    a, b = FrameGenerator(3), FrameGenerator(3)
    frames_a = [a.next() for _ in range(300)] + [a.next(risky=True) for _ in range(100)]
    frames_b = [b.next() for _ in range(300)] + [b.next(risky=True) for _ in range(100)]
    assert frames_a == frames_b
    assert {m for _, _, m in frames_a[:300]} == set(SAFE_MUTATIONS)
    assert {m for _, _, m in frames_a[300:]} == set(RISKY_MUTATIONS)
    for frame, _, _ in frames_a:
        assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4


def test_sweep_kills_what_a_crashed_harness_left(tmp_path):
    """A harness that died (SIGKILL) leaves its state file; the next run's sweep kills the
    processes it lists (only if their start time matches) and removes the file."""
    state_dir = tmp_path / "state"
    script = (
        "import sys, subprocess, time\n"
        f"sys.path.insert(0, {os.getcwd()!r})\n"
        "from pathlib import Path\n"
        "from tests.faults.state import RunState\n"
        f"s = RunState('dead01', Path({str(state_dir)!r}))\n"
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "s.add_pid(p.pid)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n")
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               text=True)
    child = int(harness.stdout.readline())
    assert process_start_time(child) is not None
    live = RunState("live01", state_dir)  # a run that is alive (this process) is left alone
    assert sweep(state_dir) == []  # the crashed one's harness still runs
    harness.send_signal(signal.SIGKILL)
    harness.wait(10)
    harness.stdout.close()
    assert sweep(state_dir) == ["dead01"]
    for _ in range(100):
        if process_start_time(child) is None or _zombie(child):
            break
        time.sleep(0.05)
    assert process_start_time(child) is None or _zombie(child)
    assert not (state_dir / "dead01.json").exists()
    assert json.loads((state_dir / "live01.json").read_text())["run_id"] == "live01"
    live.cleanup()
    assert not (state_dir / "live01.json").exists()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
