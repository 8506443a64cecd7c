from protocol.record_builder import RecordBatchBuilder, build_control_batch


def txn_batch(seq, n=2, pid=7, epoch=0):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=True)
    for i in range(n):
        b.append(1000 + i, None, b"t%d" % i)
    return bytearray(b.build())


def marker(kind, pid=7, epoch=0):
    return bytearray(build_control_batch(kind, pid, epoch, coordinator_epoch=3, timestamp=5))


def test_lso_and_aborted_transactions_survive_reopen(make_log):
    log = make_log()
    log.append_as_leader(txn_batch(0), 0)  # offsets 0-1
    log.append_as_leader(txn_batch(2), 0)  # 2-3
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 0
    log.append_as_leader(marker("abort"), 0, origin="coordinator")  # 4
    log.append_as_leader(txn_batch(4), 0)  # 5-6, a new transaction
    log.append_as_leader(marker("commit"), 0, origin="coordinator")  # 7
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 8
    assert log.collect_aborted_transactions(0, 8) == [(7, 0)]
    assert log.collect_aborted_transactions(5, 8) == []
    assert log.producer_state.last_entry(7).coordinator_epoch == 3
    log.flush()
    rp = log.recovery_point
    log.close()
    for clean in (True, False):
        again = make_log(clean_shutdown=clean, recovery_point=0 if not clean else rp)
        assert again.collect_aborted_transactions(0, 8) == [(7, 0)]
        again.high_watermark = again.log_end_offset  # the HW checkpoint's value
        assert again.producer_state.first_unstable_offset() is None
        again.close_handlers()


def test_markers_skip_sequence_checks_but_not_fencing(make_log):
    import pytest

    from protocol.errors import ErrorCode, KafkaError
    log = make_log()
    log.append_as_leader(txn_batch(0, epoch=2), 0)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(marker("commit", epoch=1), 0, origin="coordinator")
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(marker("commit", epoch=2), 0)  # clients may not write markers
    assert e.value.code == ErrorCode.INVALID_RECORD
    log.append_as_leader(marker("commit", epoch=2), 0, origin="coordinator")
    log.truncate_to(1)
    assert log.collect_aborted_transactions(0, 10) == []
