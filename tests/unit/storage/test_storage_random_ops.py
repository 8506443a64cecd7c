"""Randomised operation sequences against a simple model of the log.

Ops: leader appends, follower-style truncation, DeleteRecords, retention by bytes, clean and
unclean (crash-like) reopen. After every op the log must hold exactly the model's batches
from the log start offset on, and every index lookup must agree with a linear scan.
"""

import dataclasses
import random

from protocol.records import iter_batches
from storage.config import LogConfig

from .conftest import build_batch, check_indexes_against_scan

CFG = LogConfig(segment_bytes=2500, index_interval_bytes=250, segment_index_bytes=2048)


def read_all(log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        got = list(iter_batches(log.read(offset, 1 << 20).records.read_bytes()))
        assert got, offset
        out.extend((b.base_offset, b.last_offset, bytes(b.buffer)[12:]) for b in got)
        offset = got[-1].last_offset + 1
    return out


def test_random_operations_match_model(make_log):
    for seed in range(4):
        rng = random.Random(seed)
        name = f"r-{seed}"
        log = make_log(CFG, name=name)
        model = []  # (base, last, bytes after the base offset/length fields)
        for _step in range(120):
            op = rng.random()
            if op < 0.6:
                n = rng.randint(1, 6)
                b = build_batch(n=n, ts=1000 + _step, value_size=rng.randint(1, 120))
                info = log.append_as_leader(b, leader_epoch=seed)
                model.append((info.first_offset, info.last_offset, bytes(b)[12:]))
            elif op < 0.7 and model:
                target = rng.randint(log.log_start_offset, log.log_end_offset)
                log.truncate_to(target)
                model = [m for m in model if m[0] < target]
            elif op < 0.78 and model:
                log.high_watermark = log.log_end_offset
                log.delete_records_before(rng.randint(log.log_start_offset, log.log_end_offset))
            elif op < 0.84:
                log.high_watermark = log.log_end_offset
                log.config = dataclasses.replace(CFG, retention_bytes=rng.randint(0, 6000))
                log.delete_old_segments()
                log.config = CFG
            elif op < 0.92:
                log.flush()
                log.close()
                log = make_log(CFG, name=name, clean_shutdown=True,
                               log_start_offset=log.log_start_offset)
            else:
                rp, start = log.recovery_point, log.log_start_offset
                log.close_handlers()
                log = make_log(CFG, name=name, clean_shutdown=False, recovery_point=rp,
                               log_start_offset=start)
            start = log.log_start_offset
            assert log.log_end_offset == (model[-1][1] + 1 if model else log.log_end_offset)
            expected = [m for m in model if m[1] >= start]
            assert read_all(log) == expected, (seed, _step)
            check_indexes_against_scan(log)
        log.close_handlers()
