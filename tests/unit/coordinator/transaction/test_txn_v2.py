"""Transaction version 2 (KIP-890 part 2) in the transaction coordinator, over real logs with
a manual clock: every EndTxn bumps the epoch and answers it, retries answer the same, markers
carry the bumped epoch and fence a zombie's late write, the implicit add of the next
transaction, an exhausted epoch moves to a new producer id, an InitProducerId fence does not
bump twice, the TV 2 state survives a coordinator failover (TransactionLogValue v1), and a
transaction version 0 transaction still behaves as before."""

import pytest

from coordinator.transaction.log_records import decode_record, key_bytes, value_bytes
from coordinator.transaction.metadata import TransactionState
from protocol.errors import ErrorCode, KafkaError
from protocol.records import iter_batches
from tests.unit.broker.dataplane_helpers import batch
from tests.unit.coordinator.transaction.txn_helpers import TxnHarness

E = ErrorCode
S = TransactionState
TV2 = 2


@pytest.fixture
async def h(tmp_path):
    harness = TxnHarness(tmp_path)
    await harness.start()
    yield harness
    await harness.stop()


async def begin_v2(h, txn_id="tx", partitions=(("t", 0),)):
    """InitProducerId, then the implicit add of a Produce v12 (the leader's add)."""
    c = h.coordinator
    err, pid, epoch = await c.handle_init_producer_id(txn_id, 60000)
    assert err == E.NONE
    assert await c.handle_add_partitions(txn_id, pid, epoch, set(partitions), TV2) == E.NONE
    assert h.metadata(txn_id).client_transaction_version == TV2
    return pid, epoch


async def test_every_end_bumps_the_epoch_and_answers_it(h):
    c = h.coordinator
    pid, epoch = await begin_v2(h, partitions=(("t", 0), ("u", 0)))
    assert await c.handle_end_transaction("tx", pid, epoch, True, TV2) == (E.NONE, pid, epoch + 1)
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_COMMIT)
    assert h.markers("t", 0) == [(pid, epoch + 1, True, 0)]
    assert h.markers("u", 0) == [(pid, epoch + 1, True, 0)]
    # a retry of the same EndTxn (the old epoch) answers as the first call did
    assert await c.handle_end_transaction("tx", pid, epoch, True, TV2) == (E.NONE, pid, epoch + 1)
    assert (await c.handle_end_transaction("tx", pid, epoch, False, TV2))[0] == \
        E.INVALID_TXN_STATE
    # the same epoch as the new one would be the next EndTxn, of no transaction: fenced
    assert (await c.handle_end_transaction("tx", pid, epoch - 1, True, TV2))[0] == \
        E.PRODUCER_FENCED
    # the next transaction runs at the bumped epoch, and its abort bumps again
    assert await c.handle_add_partitions("tx", pid, epoch + 1, {("t", 1)}, TV2) == E.NONE
    assert await c.handle_end_transaction("tx", pid, epoch + 1, False, TV2) == \
        (E.NONE, pid, epoch + 2)
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_ABORT)
    assert h.markers("t", 1) == [(pid, epoch + 2, False, 0)]


async def test_a_zombie_write_after_the_abort_is_fenced(h):
    c = h.coordinator
    pid, epoch = await begin_v2(h)
    log = h.rm.get_partition("t", 0).log
    log.append_as_leader(batch(2, producer_id=pid, producer_epoch=epoch, base_sequence=0), 0)
    assert (await c.handle_end_transaction("tx", pid, epoch, False, TV2))[0] == E.NONE
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_ABORT)
    # the late (retried) write of the aborted transaction, at its old epoch
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(batch(1, producer_id=pid, producer_epoch=epoch, base_sequence=2), 0)
    assert e.value.code == E.INVALID_PRODUCER_EPOCH
    # the coordinator also refuses to add it to a transaction (the leader's implicit add)
    assert await c.handle_add_partitions("tx", pid, epoch, {("t", 0)}, TV2) == \
        E.PRODUCER_FENCED
    # the producer itself goes on at the new epoch, from sequence 0
    log.append_as_leader(batch(1, producer_id=pid, producer_epoch=epoch + 1, base_sequence=0), 0)


async def test_an_exhausted_epoch_moves_to_a_new_producer_id(h):
    c = h.coordinator
    pid, _ = await begin_v2(h)
    h.metadata("tx").producer_epoch = 32766  # the bump reaches Short.MaxValue
    err, new_pid, new_epoch = await c.handle_end_transaction("tx", pid, 32766, True, TV2)
    assert (err, new_epoch) == (E.NONE, 0) and new_pid != pid
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_COMMIT)
    md = h.metadata("tx")
    assert (md.producer_id, md.producer_epoch, md.previous_producer_id) == (new_pid, 0, pid)
    assert h.markers("t", 0) == [(pid, 32767, True, 0)]
    # a retry with the old producer id answers the new one
    assert await c.handle_end_transaction("tx", pid, 32766, True, TV2) == (E.NONE, new_pid, 0)


async def test_init_producer_id_fences_an_ongoing_v2_transaction_once(h):
    c = h.coordinator
    pid, epoch = await begin_v2(h)
    assert (await c.handle_init_producer_id("tx", 60000))[0] == E.CONCURRENT_TRANSACTIONS
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_ABORT)
    assert h.markers("t", 0) == [(pid, epoch + 1, False, 0)]  # fenced once, not twice
    assert await c.handle_init_producer_id("tx", 60000) == (E.NONE, pid, epoch + 2)


async def test_v2_state_survives_a_failover(h):
    c = h.coordinator
    pid, epoch = await begin_v2(h, partitions=(("t", 0), ("t", 1)))
    h.channel.add_txn_markers_to_send = lambda *a: None  # the old coordinator dies here
    assert await c.handle_end_transaction("tx", pid, epoch, True, TV2) == (E.NONE, pid, epoch + 1)
    c2 = await h.restart_coordinator(epoch=1)
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_COMMIT)
    assert h.markers("t", 0) == [(pid, epoch + 1, True, 1)]
    md = h.metadata("tx")
    assert (md.client_transaction_version, md.producer_epoch) == (TV2, epoch + 1)
    # the client's retry of its EndTxn reaches the new coordinator: still a success
    assert await c2.handle_end_transaction("tx", pid, epoch, True, TV2) == \
        (E.NONE, pid, epoch + 1)


def test_tv2_records_are_value_version_1():
    from coordinator.transaction.metadata import TxnTransitMetadata
    t = TxnTransitMetadata(7, 6, 3, 2, 60000, S.PREPARE_COMMIT, frozenset({("t", 0)}), 10, 11,
                           next_producer_id=9, client_transaction_version=TV2)
    value = value_bytes(t)
    assert value[:2] == b"\x00\x01"
    _, md = decode_record(key_bytes("x"), value)
    assert (md.producer_id, md.previous_producer_id, md.next_producer_id, md.producer_epoch,
            md.client_transaction_version) == (7, 6, 9, 3, TV2)
    v0 = value_bytes(TxnTransitMetadata(7, 6, 3, 2, 60000, S.PREPARE_COMMIT,
                                        frozenset({("t", 0)}), 10, 11))
    assert v0[:2] == b"\x00\x00"  # transaction version 0: as before


async def test_version_0_transactions_keep_their_epoch(h):
    c = h.coordinator
    err, pid, epoch = await c.handle_init_producer_id("tx", 60000)
    assert await c.handle_add_partitions("tx", pid, epoch, {("t", 0)}, 0) == E.NONE
    # EndTxn v5 without transaction version 2 finalized: tv 0, no bump
    assert await c.handle_end_transaction("tx", pid, epoch, True, 0) == (E.NONE, pid, epoch)
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_COMMIT)
    assert h.markers("t", 0) == [(pid, epoch, True, 0)]


# --- through the handlers: gated by the finalized transaction.version ----------------------------
class Features:
    def __init__(self, levels) -> None:
        self.levels = levels

    def finalized_features(self):
        return 1, dict(self.levels)


def ctx(h, version, levels):
    from types import SimpleNamespace
    h.services.controller = Features(levels)
    return SimpleNamespace(broker=h.services, api_version=version, client_address=("h", 1))


def produce_v12(txn_id, pid, epoch, seq=0, partition=0):
    from protocol.messages import ProduceRequest
    from protocol.record_builder import RecordBatchBuilder
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=True)
    b.append(1000, b"k", b"v")
    return ProduceRequest(transactional_id=txn_id, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=partition,
                                                records=memoryview(bytearray(b.build())))])])


@pytest.mark.parametrize("levels,bumped", [({"transaction.version": 2}, True),
                                           ({"transaction.version": 1}, False), ({}, False)])
async def test_produce_v12_and_end_txn_v5_follow_the_finalized_version(h, levels, bumped):
    from broker.handlers import produce, transactions
    from protocol.messages import EndTxnRequest
    c = h.coordinator
    err, pid, epoch = await c.handle_init_producer_id("tx", 60000)
    resp = await produce.handle_produce(ctx(h, 12, levels), produce_v12("tx", pid, epoch))
    code = resp.responses[0].partition_responses[0].error_code
    if not bumped:  # no implicit add: KIP-890 part 1 refuses the unadded partition
        assert code == E.TRANSACTION_ABORTABLE
        assert await c.handle_add_partitions("tx", pid, epoch, {("t", 0)}, 0) == E.NONE
        resp = await produce.handle_produce(ctx(h, 12, levels), produce_v12("tx", pid, epoch))
        code = resp.responses[0].partition_responses[0].error_code
    assert code == E.NONE
    assert h.metadata("tx").topic_partitions == {("t", 0)}
    end = await transactions.handle_end_txn(ctx(h, 5, levels), EndTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True))
    assert (end.error_code, end.producer_id, end.producer_epoch) == \
        (E.NONE, pid, epoch + 1 if bumped else epoch)
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_COMMIT)
    log = h.rm.get_partition("t", 0).log
    marker = next(iter_batches(log.read(1, 1 << 20).records.read_bytes()))
    assert (log.log_end_offset, marker.is_control, marker.producer_epoch) == \
        (2, True, epoch + 1 if bumped else epoch)


async def test_a_newer_epoch_is_verified_while_the_previous_transaction_is_open(h):
    """The next TV 2 transaction's first batch (epoch + 1) may reach a leader before the
    previous transaction's marker: it must go to the coordinator (which answers
    CONCURRENT_TRANSACTIONS until the markers are out), not join the open transaction."""
    from protocol.record_builder import RecordBatchBuilder
    b = RecordBatchBuilder(producer_id=5, producer_epoch=3, base_sequence=0,
                           is_transactional=True)
    b.append(1000, b"k", b"v")
    part = h.rm.get_partition("t", 0)
    guard = part.maybe_start_transaction_verification(5, 0, 3)
    part.log.append_as_leader(memoryview(bytearray(b.build())), 0, verification_guard=guard)
    assert part.maybe_start_transaction_verification(5, 1, 3) is None  # same epoch: open
    assert part.maybe_start_transaction_verification(5, 0, 4) is not None


def _txn_batch(pid, epoch, seq=0):
    from protocol.record_builder import RecordBatchBuilder
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=True)
    b.append(1000, b"k", b"v")
    return memoryview(bytearray(b.build()))


def _marker(pid, epoch, commit=True):
    from protocol.record_builder import build_control_batch
    return memoryview(bytearray(build_control_batch("commit" if commit else "abort", pid,
                                                    epoch, 0, 1000)))


async def test_the_next_transactions_guard_survives_the_previous_marker(h):
    """TV 2: the next transaction's first batch (epoch 4) is verified before the marker of
    the open one (data at 3, marker at 4) lands; the coordinator then adds the partition and
    the batch must append with the guard it got before the marker (CI saw INVALID_TXN_STATE
    after a coordinator failover)."""
    part = h.rm.get_partition("t", 0)
    log = part.log
    log.append_as_leader(_txn_batch(5, 3), 0,
                         verification_guard=part.maybe_start_transaction_verification(5, 0, 3))
    guard = part.maybe_start_transaction_verification(5, 0, 4)
    assert guard is not None
    log.append_as_leader(_marker(5, 4), 0, origin="coordinator")
    assert part.maybe_start_transaction_verification(5, 0, 4) is guard  # the same guard
    info = log.append_as_leader(_txn_batch(5, 4), 0, verification_guard=guard)
    assert info.first_offset == 2
    assert part.maybe_start_transaction_verification(5, 1, 4) is None  # open at epoch 4


async def test_a_marker_still_spends_the_guard_of_the_transaction_it_ends(h):
    """The KIP-890 ABA case: a guard made while no transaction is open here (a verification
    answered for a transaction that is then aborted) is spent by the abort marker, at the
    same epoch (TV 1) and at the next one (TV 2)."""
    from protocol.errors import KafkaError
    part = h.rm.get_partition("t", 0)
    log = part.log
    for pid, marker_epoch in ((5, 3), (6, 4)):
        stale = part.maybe_start_transaction_verification(pid, 0, 3)
        log.append_as_leader(_marker(pid, marker_epoch, commit=False), 0, origin="coordinator")
        with pytest.raises(KafkaError) as e:
            log.append_as_leader(_txn_batch(pid, marker_epoch), 0, verification_guard=stale)
        assert e.value.code == E.INVALID_TXN_STATE
