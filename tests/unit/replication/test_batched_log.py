"""The leader's ISR change lines: one line each when few partitions change in a loop
iteration, one summary line (each partition at DEBUG) when many do."""

import asyncio
import logging

from broker.replication.batched_log import LISTED, BatchedLog


def _lines(caplog, level):
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_few_changes_keep_a_line_each(caplog):
    caplog.set_level(logging.INFO, logger="t.isr")
    changes = BatchedLog(logging.getLogger("t.isr"))

    async def run():
        for i in range(3):
            changes.add("expanding ISR", f"t-{i}: expanding ISR from [1] to [1, 2]")
        assert _lines(caplog, logging.INFO) == []  # written when the iteration ends
        await asyncio.sleep(0)

    asyncio.run(run())
    assert _lines(caplog, logging.INFO) == [
        f"t-{i}: expanding ISR from [1] to [1, 2]" for i in range(3)]


def test_many_changes_are_summarised_with_each_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="t.isr")
    changes = BatchedLog(logging.getLogger("t.isr"))
    n = LISTED * 5

    async def run():
        for i in range(n):
            changes.add("ISR updated", f"t-{i}: ISR updated to [1, 2] and partition epoch to 3")
        changes.add("shrinking ISR", "u-0: shrinking ISR from [1, 2] to [1]")
        await asyncio.sleep(0)

    asyncio.run(run())
    info = _lines(caplog, logging.INFO)
    assert len(info) == 2
    summary = next(m for m in info if m.startswith("ISR updated"))
    assert summary.startswith(f"ISR updated of {n} partitions: t-0: ISR updated to [1, 2]")
    assert f"t-{LISTED - 1}:" in summary and f"t-{LISTED}:" not in summary
    assert "u-0: shrinking ISR from [1, 2] to [1]" in info
    assert len(_lines(caplog, logging.DEBUG)) == n


def test_without_a_loop_a_line_is_written_at_once_and_a_new_loop_flushes_again(caplog):
    caplog.set_level(logging.INFO, logger="t.isr")
    changes = BatchedLog(logging.getLogger("t.isr"))
    changes.add("expanding ISR", "t-0: expanding ISR from [1] to [1, 2]")
    assert _lines(caplog, logging.INFO) == ["t-0: expanding ISR from [1] to [1, 2]"]

    async def add_only():  # the loop ends before its flush runs
        changes.add("expanding ISR", "t-1: expanding ISR from [1] to [1, 2]")

    loop = asyncio.new_event_loop()
    loop.run_until_complete(add_only())
    loop.close()

    async def add_and_wait():
        changes.add("expanding ISR", "t-2: expanding ISR from [1] to [1, 2]")
        await asyncio.sleep(0)

    asyncio.run(add_and_wait())
    assert _lines(caplog, logging.INFO)[-1] == "t-2: expanding ISR from [1] to [1, 2]"
