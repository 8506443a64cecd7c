"""Crash test: a child process appends continuously and is SIGKILLed at random moments.

After each kill the reopened log (unclean start, recovery from the checkpointed recovery
point) must hold a prefix of what was appended (record value == its offset), keep at least
everything the child reported flushed, and every index lookup must agree with a linear scan.
"""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from protocol.records import iter_batches
from storage.config import LogConfig
from storage.log_manager import LogManager

from .conftest import check_indexes_against_scan

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from protocol.record_builder import RecordBatchBuilder
    from storage.config import LogConfig
    from storage.log_manager import LogManager

    cfg = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024,
                    segment_index_bytes=4096)
    mgr = LogManager([sys.argv[1]], cfg)
    mgr.load_all()
    log = mgr.get_or_create_log(("crash", 0))
    print("start", log.log_end_offset, flush=True)
    deadline = time.time() + 20
    n = 0
    while time.time() < deadline:
        off = log.log_end_offset
        b = RecordBatchBuilder()
        for i in range(1 + n % 7):
            b.append(1_000_000 + off + i, None, str(off + i).encode() * (1 + n % 30))
        log.append_as_leader(bytearray(b.build()), leader_epoch=1)
        n += 1
        if n % 50 == 0:
            log.flush()
            mgr.checkpoint_recovery_points()
            print("flushed", log.recovery_point, flush=True)
""")


def verify(log_dir):
    mgr = LogManager([log_dir], LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024,
                                          segment_index_bytes=4096))
    mgr.load_all()
    log = mgr.get_log(("crash", 0))
    expected = 0
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records.read_bytes()
        for batch in iter_batches(data):
            batch.validate()
            for rec in batch:
                assert rec.offset == expected
                assert rec.value == str(expected).encode() * (len(rec.value) // len(str(expected)))
                assert rec.timestamp == 1_000_000 + expected
                expected += 1
            offset = batch.next_offset
    assert expected == log.log_end_offset
    check_indexes_against_scan(log)
    leo = log.log_end_offset
    log.close_handlers()
    return leo


def test_sigkill_during_appends_leaves_a_flushed_prefix(tmp_path):
    rng = random.Random()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log_dir = str(tmp_path / "logs")
    previous = 0
    for _round in range(4):
        proc = subprocess.Popen([sys.executable, str(script), log_dir, REPO],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = proc.stdout.readline().split()
            assert first and first[0] == b"start", proc.stderr.read()
            assert int(first[1]) >= previous
            time.sleep(rng.uniform(0.2, 0.7))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=10)
        flushed = [int(ln.split()[1]) for ln in out.splitlines() if ln.startswith(b"flushed")]
        assert proc.returncode == -signal.SIGKILL, err
        leo = verify(log_dir)
        assert leo >= (flushed[-1] if flushed else previous)
        previous = leo
    assert previous > 0
