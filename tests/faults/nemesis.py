"""Nemeses: faults planned from the seed, applied one at a time, always undone.

Kinds (``--nemesis``) and what each does to the cluster (``tests.faults.runner.FaultCluster``):

==========  ==============================================================================
kill        SIGKILL a broker (the leader of a workload partition, a follower, the controller
            or any), keep it down 1-6 s, start it again on the same data
pause       SIGSTOP a broker for 7-12 s (longer than the ZooKeeper and consumer session
            timeouts of 6 s), then SIGCONT
partition   cut links for 6-15 s: ``isolate-leader`` (a partition leader from every other
            broker and ZooKeeper; clients still reach it), ``majority-minority`` (a random
            split of the brokers, ZooKeeper on a random side), ``bridge`` (two halves that
            only one node hears both of), ``isolate-zk`` (one broker from ZooKeeper only)
zk          ZooKeeper restart: SIGTERM (``restart``) or SIGKILL (``kill``), 1-8 s down
torn        torn-write crash: SIGKILL a broker while the workload fsyncs every message
            (``flush.messages=1`` on the topic), then tear the tail of one of its active
            segments (a partial copy of its last batch, a batch with a bad CRC, or garbage)
            as a write cut short would leave it, and start it again (recovery must truncate)
shrink-kill the ISR-shrink-then-crash sequence behind unclean-election losses: cut a
            partition leader (preferably the controller, so that it can still shrink the ISR)
            from its followers for 8-12 s (> ``replica.lag.time.max.ms``), so it acknowledges
            writes alone when ``min.insync.replicas`` allows; then SIGKILL it, heal, and
            start it again 5 s later. With clean elections only the partition waits for it
            (no loss); with ``unclean.leader.election.enable`` a stale follower takes over
            and the writes acknowledged alone are lost
==========  ==============================================================================

``plan()`` draws the whole schedule from ``random.Random(seed)`` before the run (kinds,
variants, target roles, durations, gaps), so a seed replays the same intent; targets by role
(leader of partition k, ...) are resolved when the fault starts.
"""

from __future__ import annotations

import logging
import random
import struct
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

KINDS = ("kill", "pause", "partition", "zk", "torn", "shrink-kill")
ROLES = ("leader", "follower", "controller", "random")
PARTITION_VARIANTS = ("isolate-leader", "majority-minority", "bridge", "isolate-zk")


@dataclass
class Fault:
    at: float  # seconds after the workload started
    kind: str
    variant: str
    duration: float
    partition: int  # the workload partition whose leader/follower a role refers to
    choice: int  # a random number for choices made at run time (which follower, split, ...)
    detail: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def applicable(kinds: list[str], brokers: int, has_zk: bool, can_cut: bool) -> list[str]:
    """Problems with running ``kinds`` on this cluster (empty when fine)."""
    problems = []
    for k in kinds:
        if k not in KINDS:
            problems.append(f"unknown nemesis {k!r} (choose from {', '.join(KINDS)})")
    if "partition" in kinds and (brokers < 2 or not can_cut):
        problems.append("partition needs --brokers >= 2 and a network that can cut links")
    if "zk" in kinds and not has_zk:
        problems.append("zk needs ZooKeeper (--brokers >= 2)")
    if "shrink-kill" in kinds and (brokers < 2 or not can_cut):
        problems.append("shrink-kill needs --brokers >= 2 and a network that can cut links")
    return problems


def plan(kinds: list[str], time_limit: float, seed: int, brokers: int, partitions: int,
         has_zk: bool) -> list[Fault]:
    """The schedule for a run of ``time_limit`` seconds (faults end 5 s before it)."""
    rng = random.Random(seed)
    roles = ["leader", "random"]
    if brokers > 1:
        roles.append("follower")
    if has_zk:
        roles.append("controller")
    faults: list[Fault] = []
    at = rng.uniform(3.0, 6.0)
    while kinds:
        kind = rng.choice(kinds)
        if kind == "kill":
            variant, duration = rng.choice(roles), rng.uniform(1.0, 6.0)
        elif kind == "pause":
            variant, duration = rng.choice(roles), rng.uniform(7.0, 12.0)
        elif kind == "partition":
            variants = [v for v in PARTITION_VARIANTS if has_zk or v != "isolate-zk"]
            if brokers < 3:
                variants = [v for v in variants if v != "bridge"]
            variant, duration = rng.choice(variants), rng.uniform(6.0, 15.0)
        elif kind == "zk":
            variant, duration = rng.choice(["restart", "kill"]), rng.uniform(1.0, 8.0)
        elif kind == "shrink-kill":
            variant, duration = "controller-led", rng.uniform(8.0, 12.0)
        else:  # torn
            variant, duration = rng.choice(["leader", "random"]), rng.uniform(1.0, 4.0)
        if at + duration > time_limit - 5.0:
            break
        faults.append(Fault(round(at, 3), kind, variant, round(duration, 3),
                            rng.randrange(partitions), rng.randrange(1 << 30)))
        at += duration + rng.uniform(2.0, 6.0)
    return faults


# ---- torn writes --------------------------------------------------------------------------
BATCH_HEAD = struct.Struct(">qi")  # baseOffset int64, batchLength int32 (RecordBatch v2)


def last_batch(segment: bytes) -> tuple[int, int] | None:
    """(position, total length) of the last complete batch of a .log segment, or None."""
    pos, last = 0, None
    while pos + BATCH_HEAD.size <= len(segment):
        _, length = BATCH_HEAD.unpack_from(segment, pos)
        end = pos + BATCH_HEAD.size + length
        if length <= 0 or end > len(segment):
            break
        last = (pos, end - pos)
        pos = end
    return last


def tear(path: Path, rng: random.Random) -> dict[str, Any]:
    """Append what a write cut short leaves at the end of segment ``path``; returns what."""
    data = path.read_bytes()
    found = last_batch(data)
    variants = ["garbage"] + (["partial", "bad-crc"] if found else [])
    variant = rng.choice(variants)
    if variant == "garbage":
        tail = rng.randbytes(rng.randint(1, 4096))
    else:
        pos, length = found  # type: ignore[misc]
        batch = bytearray(data[pos:pos + length])
        base, _ = BATCH_HEAD.unpack_from(batch, 0)
        last_delta = struct.unpack_from(">i", batch, 23)[0]
        struct.pack_into(">q", batch, 0, base + last_delta + 1)  # the next batch's offsets
        if variant == "partial":
            tail = bytes(batch[:rng.randint(1, length - 1)])
        else:
            i = rng.randrange(61, length) if length > 61 else length - 1
            batch[i] ^= 0xFF
            tail = bytes(batch)
    with open(path, "ab") as f:
        f.write(tail)
    return {"segment": str(path), "variant": variant, "bytes": len(tail),
            "at": len(data)}


class NemesisRunner(threading.Thread):
    """Applies the planned faults to ``cluster`` until ``stop`` is set or the plan ends."""

    def __init__(self, cluster: Any, faults: list[Fault], history: Any, seed: int,
                 stop: threading.Event, t0: float) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.cluster, self.faults, self.history = cluster, faults, history
        self.rng = random.Random(seed ^ 0x5EED)
        self.stop_event = stop
        self.t0 = t0
        self.errors: list[str] = []
        self.applied = 0

    def _sleep(self, seconds: float) -> bool:
        """False when the run is being stopped."""
        return not self.stop_event.wait(max(0.0, seconds))

    def run(self) -> None:
        for fault in self.faults:
            if not self._sleep(self.t0 + fault.at - time.monotonic()):
                break
            try:
                undo = self.cluster.apply(fault, self.rng)
            except Exception as e:
                log.exception("nemesis %s/%s failed to start", fault.kind, fault.variant)
                self.errors.append(f"{fault.kind}/{fault.variant} start: {_first_line(e)}")
                self.history.add("nemesis", kind=fault.kind, phase="error",
                                 variant=fault.variant, error=repr(e))
                continue
            self.applied += 1
            self.history.add("nemesis", kind=fault.kind, phase="start", variant=fault.variant,
                             detail=fault.detail)
            self._sleep(fault.duration)
            try:
                undo()
            except Exception as e:
                log.exception("nemesis %s/%s failed to end", fault.kind, fault.variant)
                self.errors.append(f"{fault.kind}/{fault.variant} end: {_first_line(e)}")
            self.history.add("nemesis", kind=fault.kind, phase="end", variant=fault.variant)


def _first_line(e: Exception) -> str:
    """``type: first line`` of an exception (a broker's start failure carries its log)."""
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:300]}"
