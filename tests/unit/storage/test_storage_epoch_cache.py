from storage.epoch_cache import LeaderEpochFileCache


def test_end_offset_for_epoch_kip279(tmp_path):
    c = LeaderEpochFileCache(str(tmp_path))
    assert c.end_offset_for_epoch(0, 10) == (-1, -1)
    for epoch, start in [(1, 0), (3, 20), (5, 50)]:
        assert c.assign(epoch, start)
    assert not c.assign(5, 60)  # same epoch again: no change
    leo = 80
    assert c.end_offset_for_epoch(5, leo) == (5, 80)  # latest epoch -> LEO
    assert c.end_offset_for_epoch(3, leo) == (3, 50)
    assert c.end_offset_for_epoch(4, leo) == (3, 50)  # unknown epoch -> largest below it
    assert c.end_offset_for_epoch(2, leo) == (1, 20)
    assert c.end_offset_for_epoch(0, leo) == (0, 0)  # before the first epoch
    assert c.end_offset_for_epoch(6, leo) == (-1, -1)  # newer than we know
    assert c.end_offset_for_epoch(-1, leo) == (-1, -1)
    assert c.epoch_for_offset(25) == 3


def test_assign_removes_conflicting_entries_and_truncates(tmp_path):
    c = LeaderEpochFileCache(str(tmp_path))
    c.assign(1, 0)
    c.assign(2, 10)
    c.assign(3, 20)
    c.assign(4, 15)  # new epoch starting before epoch 3's start: 3 is dropped
    assert c.entries == [(1, 0), (2, 10), (4, 15)]
    c.truncate_from_end(12)
    assert c.entries == [(1, 0), (2, 10)]
    c.truncate_from_start(11)
    assert c.entries == [(2, 11)]


def test_persisted_by_flush(tmp_path):
    c = LeaderEpochFileCache(str(tmp_path))
    c.assign(2, 7)
    assert LeaderEpochFileCache(str(tmp_path)).entries == []
    c.flush()
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n1\n2 7\n"
    assert LeaderEpochFileCache(str(tmp_path)).entries == [(2, 7)]
