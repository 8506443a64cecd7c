"""cli._progress (tqdm bars: when they show, their final line) and the per-partition bytes of
``reassign-partitions --verify`` (cli._reassign_progress) from DescribeLogDirs answers."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace as NS

import pytest

from cli._progress import ProgressBar, human_bytes, static_bar
from cli._reassign_progress import verify_bars
from client.connection import ToolError


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv("JOSEF_PROGRESS", raising=False)


def test_bar_is_off_for_a_pipe_and_on_for_a_terminal():
    pipe = io.StringIO()
    with ProgressBar(10, "x", stream=pipe) as bar:
        bar.update(10)
    assert pipe.getvalue() == "" and bar.done == 10
    tty = _Tty()
    with ProgressBar(10, "x", stream=tty) as bar:
        bar.update(10)
    assert "x: 100.0%" in tty.getvalue()


def test_environment_forces_or_silences(monkeypatch):
    monkeypatch.setenv("JOSEF_PROGRESS", "1")
    pipe = io.StringIO()
    with ProgressBar(4, "x", stream=pipe) as bar:
        bar.update(4)
    assert "x: 100.0%" in pipe.getvalue()
    monkeypatch.setenv("JOSEF_PROGRESS", "0")
    tty = _Tty()
    with ProgressBar(4, "x", stream=tty) as bar:
        bar.update(4)
    assert tty.getvalue() == ""


def test_quiet_when_stdout_is_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stdout", _Tty())
    tty = _Tty()
    with ProgressBar(4, "x", stream=tty, quiet_when_stdout_is_tty=True) as bar:
        bar.update(4)
    assert tty.getvalue() == ""


def test_final_line_records_with_postfix_and_late_total():
    out = io.StringIO()
    bar = ProgressBar(None, "del", unit="records", stream=out, force=True)
    bar.set_total(30)
    bar.update(30)
    bar.set_postfix("2/2 partitions")
    bar.close()
    last = re.split(r"[\r\n]", out.getvalue().rstrip("\n"))[-1]
    assert re.fullmatch(r"del: 100\.0%\|#+\| 30/30 records \[00:00, [\d.]+[kMG]? records/s, "
                        r"2/2 partitions\]", last), last
    assert out.getvalue().endswith("\n")


def test_static_bar_and_sizes():
    assert human_bytes(999) == "999B" and human_bytes(1536) == "1.50kB"
    assert static_bar("t-0", 5 << 20, 12 << 20) == "t-0:  41.7%|########            | 5.00MB/12.0MB"
    assert static_bar("t-1", 0, 0) == "t-1: 100.0%|####################| 0B/0B"
    assert static_bar("t-2", 20, 10).startswith("t-2: 100.0%")  # a replica ahead: capped


class _Client:
    """Answers Metadata and DescribeLogDirs as brokers 1-3 would; broker 3 may be down."""

    def __init__(self, sizes: dict[int, dict[tuple[str, int], int]], down=()) -> None:
        self.sizes, self.down, self.timeout = sizes, set(down), 5.0

    def metadata(self, topics, auto_create=False):
        return NS(topics=[NS(name="t", error_code=0, partitions=[
            NS(partition_index=0, leader_id=1, error_code=0),
            NS(partition_index=1, leader_id=2, error_code=0)])])

    def request(self, api_key, body, version=None, node=None, timeout=None):
        assert api_key == 35 and timeout == 5.0
        if node in self.down:
            raise ToolError(f"broker {node}: timed out")
        held = self.sizes[node]
        return NS(results=[NS(error_code=0, log_dir="/d", topics=[
            NS(name="t", partitions=[NS(partition_index=p, partition_size=held[("t", p)],
                                        is_future_key=False)
                                     for (_t, p) in sorted(held)])])])


def test_verify_bars_in_progress_and_completed():
    client = _Client({1: {("t", 0): 4000}, 2: {("t", 1): 2048}, 3: {("t", 0): 1000}})
    ongoing = {("t", 0): NS(adding_replicas=[3], removing_replicas=[1])}
    bars = verify_bars(client, {("t", 0): [2, 3], ("t", 1): [2]}, ongoing)
    assert bars[("t", 0)] == "t-0:  25.0%|#####               | 0.98kB/3.91kB on broker 3"
    assert bars[("t", 1)] == "t-1: 100.0%|####################| 2.00kB/2.00kB"


def test_verify_bars_unreachable_broker():
    client = _Client({1: {("t", 0): 4000}, 2: {("t", 1): 10}}, down={3})
    ongoing = {("t", 0): NS(adding_replicas=[3], removing_replicas=[])}
    bars = verify_bars(client, {("t", 0): [1, 3]}, ongoing)
    assert bars[("t", 0)] == "t-0: size unknown (brokers 3 did not answer)"
