"""The AlterPartition request a leader builds (broker/replication/alter_partition_manager.py):
every queued change with its own ISR, in v0-v3, while partitions with the same ISR share
the request's ISR arrays (encoded only)."""

from __future__ import annotations

import uuid

import pytest

from broker.replication.alter_partition_manager import AlterPartitionItem, AlterPartitionManager
from broker.replication.replica_state import LeaderAndIsr
from protocol.messages import AlterPartitionRequest


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_each_change_keeps_its_isr_and_equal_isrs_share_arrays(version):
    tid = uuid.uuid4()
    isrs = [(1, 2, 3), (1, 2), (1, 2, 3), (3, 1), (1, 2)]
    items = [AlterPartitionItem("t", tid, p, LeaderAndIsr(1, 5, isr, 7 + p), -1, None)
             for p, isr in enumerate(isrs)]
    m = AlterPartitionManager(1, lambda: None, lambda: 42)
    request, names = m._build(items, version)
    parts = request.topics[0].partitions
    assert parts[0].new_isr is parts[2].new_isr  # shared, not rebuilt per partition
    assert parts[0].new_isr_with_epochs is parts[2].new_isr_with_epochs
    back = AlterPartitionRequest.decode(request.encode(version), version)
    assert back.broker_id == 1 and back.broker_epoch == 42
    got = back.topics[0].partitions
    for p, isr in enumerate(isrs):
        assert got[p].partition_index == p and got[p].partition_epoch == 7 + p
        if version >= 3:
            assert [(b.broker_id, b.broker_epoch) for b in got[p].new_isr_with_epochs] == \
                [(b, -1) for b in isr]
        else:
            assert tuple(got[p].new_isr) == isr
    assert names == {tid: "t"}
