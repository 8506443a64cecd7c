import os
import random

import pytest

from storage.index import CorruptIndexError, IndexOffsetOverflowError, OffsetIndex, TimeIndex


def test_offset_index_preallocated_lookup_and_trim(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100, 8 * 1000 + 5)
    assert idx.max_entries == 1000
    entries = [(100 + 3 * i + 1, 50 * i) for i in range(300)]
    for off, pos in entries:
        idx.append(off, pos)
    idx.flush()  # the file appears on the first write-out
    assert os.path.getsize(path) == 8000  # rounded down to a whole entry
    for target in range(90, 1100):
        expected = (100, 0)
        for off, pos in entries:
            if off <= target:
                expected = (off, pos)
        assert idx.lookup(target) == expected
    idx.close()
    assert os.path.getsize(path) == 300 * 8
    with open(path, "rb") as f:
        raw = f.read(16)
    assert raw == bytes.fromhex("00000001 00000000 00000004 00000032".replace(" ", ""))
    again = OffsetIndex(path, 100, 8000, writable=False)
    assert again.entries == 300 and again.lookup(1000) == entries[-1]
    again.sanity_check(log_size=50 * 300)
    again.close()


def test_offset_index_rejects_bad_appends_and_overflow(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, 80)
    idx.append(5, 0)
    with pytest.raises(ValueError):
        idx.append(5, 10)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(1 << 31, 20)
    for i in range(9):
        idx.append(10 + i, 100 + i)
    assert idx.is_full
    with pytest.raises(IndexError):
        idx.append(100, 1000)
    idx.close()


def test_offset_index_truncate_to(tmp_path):
    idx = OffsetIndex(str(tmp_path / "b.index"), 0, 800)
    for i in range(10):
        idx.append(i * 10, i * 100)
    idx.truncate_to(45)
    assert idx.entries == 5 and idx.lookup(1000) == (40, 400)
    idx.truncate_to(40)
    assert idx.entries == 4
    idx.append(41, 450)
    assert idx.lookup(41) == (41, 450)
    idx.close()


def test_sanity_check_detects_garbage(tmp_path):
    path = str(tmp_path / "c.index")
    with open(path, "wb") as f:
        f.write(bytes(8 * 50))  # a preallocated, never-written index after a crash
    idx = OffsetIndex(path, 0, 800, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(10_000)
    idx.close_handler()
    with open(path, "wb") as f:
        f.write(os.urandom(13))
    idx = OffsetIndex(path, 0, 800, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(10_000)
    idx.close_handler()


def test_time_index_append_lookup_truncate(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    idx = TimeIndex(path, 0, 12 * 20)
    idx.maybe_append(1000, 3)
    idx.maybe_append(1000, 5)  # not larger: ignored
    idx.maybe_append(1500, 9)
    idx.maybe_append(2000, 20)
    assert idx.entries == 3
    assert idx.lookup(999) == (-1, 0)
    assert idx.lookup(1000) == (1000, 3)
    assert idx.lookup(1999) == (1500, 9)
    assert idx.lookup(10**12) == (2000, 20)
    idx.truncate_to(9)
    assert idx.entries == 1 and idx.last_entry == (1000, 3)
    idx.close()
    assert os.path.getsize(path) == 12
    with open(path, "rb") as f:
        assert f.read() == (1000).to_bytes(8, "big") + (3).to_bytes(4, "big")


def test_time_index_keeps_a_slot_for_the_roll_entry(tmp_path):
    idx = TimeIndex(str(tmp_path / "d.timeindex"), 0, 12 * 4)
    for i in range(3):
        idx.maybe_append(100 + i, i)
    assert idx.is_full
    idx.maybe_append(200, 10, skip_full_check=True)
    assert idx.entries == 4
    idx.close()


def test_binary_search_matches_linear_scan_random(tmp_path):
    rng = random.Random(7)
    idx = OffsetIndex(str(tmp_path / "e.index"), 1000, 8 * 5000)
    off, pos, entries = 1000, 0, []
    for _ in range(3000):
        off += rng.randint(1, 5)
        pos += rng.randint(1, 500)
        idx.append(off, pos)
        entries.append((off, pos))
    for _ in range(2000):
        t = rng.randint(900, off + 10)
        lin = max((e for e in entries if e[0] <= t), default=(1000, 0))
        assert idx.lookup(t) == lin
    idx.close()
