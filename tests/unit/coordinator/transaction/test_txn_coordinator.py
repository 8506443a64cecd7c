"""The transaction coordinator and its state machine, with a manual clock over real logs:
InitProducerId (new ids, epoch bumps, KIP-360/588 expected epochs, fencing an ongoing
transaction), AddPartitions, EndTxn with markers written through the local channel,
zombie fencing, timeouts, transactional id expiration, reload after a failover, KIP-890
verification, ListTransactions filters, and the TransactionLog record format."""

import pytest

from coordinator.transaction.log_records import decode_record, key_bytes, value_bytes
from coordinator.transaction.metadata import (
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
)
from coordinator.transaction.state_manager import partition_for
from protocol.errors import ErrorCode, KafkaError
from tests.unit.broker.dataplane_helpers import batch
from tests.unit.coordinator.transaction.txn_helpers import TxnHarness

E = ErrorCode
S = TransactionState


@pytest.fixture
async def h(tmp_path):
    harness = TxnHarness(tmp_path)
    await harness.start()
    yield harness
    await harness.stop()


async def begin(h, txn_id="tx", partitions=(("t", 0),), timeout=60000):
    c = h.coordinator
    err, pid, epoch = await c.handle_init_producer_id(txn_id, timeout)
    assert err == E.NONE
    assert await c.handle_add_partitions(txn_id, pid, epoch, set(partitions)) == E.NONE
    return pid, epoch


# --- the state machine -------------------------------------------------------------------------
def test_state_machine_transitions():
    md = TransactionMetadata("x", 7, 0, 1000, S.EMPTY)
    with pytest.raises(IllegalTransition):
        md.prepare_abort_or_commit(S.PREPARE_COMMIT, 5)  # Empty -> PrepareCommit
    t = md.prepare_add_partitions({("t", 0)}, 10)
    with pytest.raises(IllegalTransition):  # one pending transition at a time
        md.prepare_add_partitions({("t", 1)}, 11)
    md.complete_transition(t)
    assert md.state == S.ONGOING and md.txn_start_timestamp == 10
    t = md.prepare_add_partitions({("t", 1)}, 20)
    md.complete_transition(t)
    assert md.txn_start_timestamp == 10 and md.topic_partitions == {("t", 0), ("t", 1)}
    fence = md.prepare_fence_producer_epoch()
    assert fence.producer_epoch == 1 and fence.txn_state == S.PREPARE_EPOCH_FENCE
    with pytest.raises(IllegalTransition):
        md.complete_transition(fence)  # PrepareEpochFence is never written
    md.pending_state = None
    md.complete_transition(md.prepare_abort_or_commit(S.PREPARE_COMMIT, 30))
    md.complete_transition(md.prepare_complete(40))
    assert md.state == S.COMPLETE_COMMIT and not md.topic_partitions
    # KIP-360: a retried bump with the previous epoch keeps the bumped epoch
    t = md.prepare_increment_producer_epoch(1000, expected_epoch=0, now_ms=50)
    md.complete_transition(t)
    assert (md.producer_epoch, md.last_producer_epoch) == (1, 0)
    retry = md.prepare_increment_producer_epoch(1000, expected_epoch=0, now_ms=60)
    assert retry.producer_epoch == 1
    md.pending_state = None
    assert md.prepare_increment_producer_epoch(1000, expected_epoch=5, now_ms=70) is None


def test_transaction_log_record_format():
    md = TransactionMetadata("tx-1", 42, 3, 60000, S.ONGOING)
    t = md.prepare_add_partitions({("b", 1), ("a", 0), ("a", 2)}, 1234)
    key, value = key_bytes("tx-1"), value_bytes(t)
    assert key == b"\x00\x00\x00\x04tx-1"  # version 0, int16 length, bytes
    assert value[:2] == b"\x00\x00"  # value version 0
    txn_id, loaded = decode_record(key, value)
    assert txn_id == "tx-1" and loaded.state == S.ONGOING
    assert loaded.topic_partitions == {("a", 0), ("a", 2), ("b", 1)}
    assert (loaded.producer_id, loaded.producer_epoch, loaded.txn_timeout_ms) == (42, 3, 60000)
    assert decode_record(key, None) == ("tx-1", None)
    # Kafka's Utils.abs(String.hashCode) % partitions: "zzzzzzzz".hashCode() = -1910022912,
    # "polygenelubricants".hashCode() = Integer.MIN_VALUE (abs -> 0)
    assert partition_for("tx-1", 50) == 3572520 % 50
    assert partition_for("zzzzzzzz", 50) == 1910022912 % 50
    assert partition_for("polygenelubricants", 50) == 0


# --- InitProducerId ------------------------------------------------------------------------
async def test_init_producer_id_new_and_bumped(h):
    c = h.coordinator
    err, pid, epoch = await c.handle_init_producer_id("tx", 60000)
    assert (err, epoch) == (E.NONE, 0)
    err, pid2, epoch2 = await c.handle_init_producer_id("tx", 60000)
    assert (err, pid2, epoch2) == (E.NONE, pid, 1)
    assert (await c.handle_init_producer_id("tx", 0))[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert (await c.handle_init_producer_id("tx", 900001))[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert (await c.handle_init_producer_id("", 1000))[0] == E.INVALID_REQUEST
    # KIP-588: a producer that knows its id and epoch may bump; an unknown epoch is fenced
    err, _, epoch3 = await c.handle_init_producer_id("tx", 60000, (pid, 1))
    assert (err, epoch3) == (E.NONE, 2)
    assert (await c.handle_init_producer_id("tx", 60000, (pid, 0)))[0] == E.PRODUCER_FENCED
    assert (await c.handle_init_producer_id("tx", 60000, (pid + 7, 2)))[0] == \
        E.PRODUCER_FENCED


async def test_epoch_exhaustion_rotates_the_producer_id(h):
    c = h.coordinator
    _, pid, _ = await c.handle_init_producer_id("tx", 60000)
    h.metadata("tx").producer_epoch = 32766  # Short.MaxValue - 1: exhausted
    err, pid2, epoch2 = await c.handle_init_producer_id("tx", 60000)
    assert err == E.NONE and pid2 != pid and epoch2 == 0
    assert h.metadata("tx").previous_producer_id == pid


# --- commit / abort ------------------------------------------------------------------------
async def test_commit_writes_markers_and_completes(h):
    c = h.coordinator
    pid, epoch = await begin(h, partitions=(("t", 0), ("u", 0)))
    assert h.metadata("tx").state == S.ONGOING
    err, _, _ = await c.handle_end_transaction("tx", pid, epoch, True)
    assert err == E.NONE
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_COMMIT)
    assert h.markers("t", 0) == [(pid, epoch, True, 0)]
    assert h.markers("u", 0) == [(pid, epoch, True, 0)]
    assert h.markers("t", 1) == []
    # a retried EndTxn of the same outcome succeeds, the other outcome does not
    assert (await c.handle_end_transaction("tx", pid, epoch, True))[0] == E.NONE
    assert (await c.handle_end_transaction("tx", pid, epoch, False))[0] == E.INVALID_TXN_STATE
    # the next transaction starts from CompleteCommit
    assert await c.handle_add_partitions("tx", pid, epoch, {("t", 1)}) == E.NONE
    assert (await c.handle_end_transaction("tx", pid, epoch, False))[0] == E.NONE
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_ABORT)
    assert h.markers("t", 1) == [(pid, epoch, False, 0)]


async def test_end_txn_errors(h):
    c = h.coordinator
    err, pid, epoch = await c.handle_init_producer_id("tx", 60000)
    assert (await c.handle_end_transaction("tx", pid, epoch, True))[0] == E.INVALID_TXN_STATE
    assert (await c.handle_end_transaction("nope", pid, epoch, True))[0] == \
        E.INVALID_PRODUCER_ID_MAPPING
    assert (await c.handle_end_transaction("tx", pid + 1, epoch, True))[0] == \
        E.INVALID_PRODUCER_ID_MAPPING
    assert await c.handle_add_partitions("tx", pid, epoch, {("t", 0)}) == E.NONE
    assert (await c.handle_end_transaction("tx", pid, epoch + 1, True))[0] == \
        E.PRODUCER_FENCED


async def test_zombie_is_fenced_and_its_transaction_aborted(h):
    c = h.coordinator
    pid, epoch = await begin(h, partitions=(("t", 0),))
    # a second producer with the same transactional id: the ongoing transaction is fenced
    err, _, _ = await c.handle_init_producer_id("tx", 60000)
    assert err == E.CONCURRENT_TRANSACTIONS
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_ABORT)
    assert h.markers("t", 0) == [(pid, epoch + 1, False, 0)]
    err, pid2, epoch2 = await c.handle_init_producer_id("tx", 60000)
    assert (err, pid2, epoch2) == (E.NONE, pid, epoch + 2)
    # the zombie's requests are fenced
    assert await c.handle_add_partitions("tx", pid, epoch, {("t", 1)}) == E.PRODUCER_FENCED
    assert (await c.handle_end_transaction("tx", pid, epoch, True))[0] == E.PRODUCER_FENCED
    # and so is its data on the partition (markers moved the partition's epoch on)
    log = h.rm.get_partition("t", 0).log
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(batch(1, producer_id=pid, producer_epoch=epoch, base_sequence=5),
                             0)
    assert e.value.code == E.INVALID_PRODUCER_EPOCH


async def test_concurrent_requests_during_markers(h):
    c = h.coordinator
    pid, epoch = await begin(h)
    gate_called = []
    real = h.channel.add_txn_markers_to_send
    h.channel.add_txn_markers_to_send = lambda *a: gate_called.append(a)  # markers held back
    assert (await c.handle_end_transaction("tx", pid, epoch, True))[0] == E.NONE
    md = h.metadata("tx")
    assert md.state == S.PREPARE_COMMIT and md.pending_state == S.COMPLETE_COMMIT
    assert await c.handle_add_partitions("tx", pid, epoch, {("t", 1)}) == \
        E.CONCURRENT_TRANSACTIONS
    assert (await c.handle_init_producer_id("tx", 60000))[0] == E.CONCURRENT_TRANSACTIONS
    assert (await c.handle_end_transaction("tx", pid, epoch, True))[0] == \
        E.CONCURRENT_TRANSACTIONS
    real(*gate_called[0])
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_COMMIT)


# --- timeouts and expiration ---------------------------------------------------------------------
async def test_timed_out_transaction_is_aborted_with_a_bumped_epoch(h):
    c = h.coordinator
    pid, epoch = await begin(h, timeout=5000)
    h.clock.advance(4000)
    assert await c.abort_timed_out_transactions() == 0
    h.clock.advance(2000)
    assert await c.abort_timed_out_transactions() == 1
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_ABORT)
    assert h.metadata("tx").producer_epoch == epoch + 1
    assert h.markers("t", 0) == [(pid, epoch + 1, False, 0)]
    assert (await c.handle_end_transaction("tx", pid, epoch, True))[0] == E.PRODUCER_FENCED


async def test_expired_transactional_ids_are_removed(h):
    c = h.coordinator
    await c.handle_init_producer_id("idle", 60000)
    pid, epoch = await begin(h, "busy")
    h.clock.advance(h.config.transactional_id_expiration_ms + 1)
    assert await h.state.remove_expired_transactional_ids() == 1  # Ongoing ones stay
    assert c.handle_describe("idle")[0] == E.TRANSACTIONAL_ID_NOT_FOUND
    assert c.handle_describe("busy")[1].state == S.ONGOING
    # the tombstone survives a reload
    await h.restart_coordinator()
    assert h.coordinator.handle_describe("idle")[0] == E.TRANSACTIONAL_ID_NOT_FOUND
    assert h.coordinator.handle_describe("busy")[1].producer_id == pid


# --- failover ------------------------------------------------------------------------------------
async def test_prepared_transaction_is_completed_after_a_reload(h):
    c = h.coordinator
    pid, epoch = await begin(h, partitions=(("t", 0), ("t", 1)))
    h.channel.add_txn_markers_to_send = lambda *a: None  # the old coordinator dies here
    assert (await c.handle_end_transaction("tx", pid, epoch, False))[0] == E.NONE
    assert h.markers("t", 0) == []
    c2 = await h.restart_coordinator(epoch=1)
    await h.until(lambda: h.metadata("tx").state == S.COMPLETE_ABORT)
    assert h.markers("t", 0) == [(pid, epoch, False, 1)]  # the new coordinator epoch
    assert h.markers("t", 1) == [(pid, epoch, False, 1)]
    assert c2.handle_describe("tx")[1].state == S.COMPLETE_ABORT


async def test_load_in_progress_and_not_coordinator(h):
    c = h.coordinator
    p = partition_for("tx", 3)
    c.on_resignation(p)
    assert (await c.handle_init_producer_id("tx", 60000))[0] == E.NOT_COORDINATOR
    h.state.loading[p] = 5
    assert (await c.handle_init_producer_id("tx", 60000))[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.handle_list([], [])[0] == E.COORDINATOR_LOAD_IN_PROGRESS


# --- KIP-890 verification and listing --------------------------------------------------------------
async def test_verify_partitions(h):
    c = h.coordinator
    pid, epoch = await begin(h, partitions=(("t", 0),))
    assert c.handle_verify_partitions("tx", pid, epoch, {("t", 0), ("t", 1)}) == {
        ("t", 0): E.NONE, ("t", 1): E.TRANSACTION_ABORTABLE}
    assert c.handle_verify_partitions("tx", pid, epoch + 1, {("t", 0)}) == {
        ("t", 0): E.PRODUCER_FENCED}
    errors = await h.services.transaction_verifier.verify("tx", pid, epoch,
                                                          [("t", 0), ("t", 1)], False)
    assert errors == {("t", 1): E.INVALID_TXN_STATE}  # older clients' form


async def test_list_transactions_filters(h):
    c = h.coordinator
    await begin(h, "a")
    await c.handle_init_producer_id("b", 60000)
    _, unknown, found = c.handle_list([], [])
    assert sorted(m.transactional_id for m in found) == ["a", "b"] and unknown == []
    _, unknown, found = c.handle_list([], ["Ongoing", "Bogus"])
    assert [m.transactional_id for m in found] == ["a"] and unknown == ["Bogus"]
    pid_b = h.metadata("b").producer_id
    assert [m.transactional_id for m in c.handle_list([pid_b], [])[2]] == ["b"]
    assert [m.transactional_id for m in c.handle_list([], ["Ongoing"], 5000)[2]] == []
    h.clock.advance(10000)  # KIP-994: running for longer than 5 s
    assert [m.transactional_id for m in c.handle_list([], ["Ongoing"], 5000)[2]] == ["a"]


async def test_dump_log_decodes_the_transaction_log(h):
    import contextlib
    import io
    import os

    from broker.cli import main
    pid, epoch = await begin(h, "dumped", partitions=(("t", 0),))
    p = partition_for("dumped", 3)
    log = h.rm.get_partition("__transaction_state", p).log
    path = os.path.join(log.dir, "00000000000000000000.log")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["dump-log", "--files", path, "--transaction-log-decoder"]) == 0
    lines = [x for x in out.getvalue().splitlines() if x.startswith("| offset")]
    assert lines[-1].endswith(
        f"key: transaction_metadata::transactionalId=dumped payload: producerId:{pid},"
        f"producerEpoch:{epoch},state=Ongoing,partitions=[t-0],"
        f"txnLastUpdateTimestamp={h.clock()},txnTimeoutMs=60000")
    assert "state=Empty,partitions=[]" in lines[0]
