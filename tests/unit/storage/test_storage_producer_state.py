import pytest

from protocol.errors import ErrorCode, KafkaError
from protocol.records import RecordBatch
from storage.log import Log

from .conftest import build_batch


def idem(seq, n=2, pid=42, epoch=0):
    return build_batch(n=n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_returns_original_offsets(make_log):
    log = make_log()
    log.append_as_leader(build_batch(n=1), 0)
    a = log.append_as_leader(idem(0), 0)
    b = log.append_as_leader(idem(2), 0)
    assert (a.first_offset, b.first_offset) == (1, 3)
    dup = log.append_as_leader(idem(0), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (1, 2)
    assert log.log_end_offset == 5


def test_only_last_five_batches_are_remembered(make_log):
    log = make_log()
    for i in range(7):
        log.append_as_leader(idem(2 * i), 0)
    assert len(log.producer_state.last_entry(42).batches) == 5
    assert log.append_as_leader(idem(4), 0).duplicate  # 3rd batch still known
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(idem(0), 0)  # forgotten -> out of order
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_and_epoch_rules(make_log):
    log = make_log()
    log.append_as_leader(idem(0, epoch=1), 0)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(idem(5, epoch=1), 0)
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(idem(2, epoch=0), 0)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(idem(2, epoch=2), 0)  # bumped epoch must restart at 0
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append_as_leader(idem(0, epoch=2), 0).first_offset == 2
    assert log.log_end_offset == 4
    # a producer unknown to this log may start at any sequence (state expired)
    assert not log.append_as_leader(idem(77, pid=9), 0).duplicate


def test_sequence_wraps_at_int32_max(make_log):
    log = make_log()
    log.append_as_leader(idem(0x7FFFFFFF, n=1), 0)
    assert log.append_as_leader(idem(0, n=1), 0).first_offset == 1


def test_check_and_update_producer_api(make_log):
    log = make_log()
    ps = log.producer_state
    b = RecordBatch(idem(0))
    assert ps.check_and_update_producer(b) is None
    assert ps.check_and_update_producer(b).first_seq == 0
    assert ps.last_entry(42).last_seq == 1


def test_producer_state_rebuilt_on_reopen(make_log, tmp_path, clock):
    log = make_log()
    log.append_as_leader(idem(0), 0)
    log.append_as_leader(idem(2), 0)
    log.flush()
    log.close()
    for clean in (True, False):
        again = make_log(clean_shutdown=clean)
        assert again.append_as_leader(idem(2), 0).duplicate
        with pytest.raises(KafkaError):
            again.append_as_leader(idem(9), 0)
        again.close_handlers()
    assert isinstance(again, Log)


def test_truncation_forgets_removed_batches(make_log):
    log = make_log()
    log.append_as_leader(idem(0), 0)
    log.append_as_leader(idem(2), 0)
    log.truncate_to(2)
    assert log.producer_state.last_entry(42).last_seq == 1
    assert log.append_as_leader(idem(2), 0).first_offset == 2
