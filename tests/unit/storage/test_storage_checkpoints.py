import os

import pytest

from storage.checkpoints import (
    CheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    read_meta_properties,
    write_meta_properties,
)


def test_offset_checkpoint_kafka_text_format_and_round_trip(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    cp = OffsetCheckpointFile(path)
    assert cp.read() == {}
    cp.write({("orders", 1): 99, ("orders", 0): 1234, ("a.b_c-d", 7): 0})
    with open(path) as f:
        assert f.read() == "0\n3\na.b_c-d 7 0\norders 0 1234\norders 1 99\n"
    assert cp.read() == {("orders", 1): 99, ("orders", 0): 1234, ("a.b_c-d", 7): 0}
    assert not os.path.exists(path + ".tmp")
    cp.write({})
    with open(path) as f:
        assert f.read() == "0\n0\n"


@pytest.mark.parametrize("text", [
    "", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\nx\n", "0\n1\nt zero 1\n",
])
def test_malformed_checkpoints_raise(tmp_path, text):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(str(path)).read()


def test_write_replaces_atomically(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    cp = OffsetCheckpointFile(str(path))
    cp.write({("t", 0): 1})
    (tmp_path / "log-start-offset-checkpoint.tmp").write_text("garbage from a crash")
    cp.write({("t", 0): 2})
    assert cp.read() == {("t", 0): 2}
    assert sorted(os.listdir(tmp_path)) == ["log-start-offset-checkpoint"]


def test_leader_epoch_checkpoint(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cp = LeaderEpochCheckpointFile(str(path))
    cp.write([(0, 0), (3, 120), (4, 500)])
    assert path.read_text() == "0\n3\n0 0\n3 120\n4 500\n"
    assert cp.read() == [(0, 0), (3, 120), (4, 500)]


def test_meta_properties(tmp_path):
    assert read_meta_properties(str(tmp_path)) is None
    write_meta_properties(str(tmp_path), 3, "abcDEF123")
    text = (tmp_path / "meta.properties").read_text()
    assert "version=0\n" in text and "broker.id=3\n" in text and "cluster.id=abcDEF123\n" in text
    assert read_meta_properties(str(tmp_path)) == {
        "version": "0", "broker.id": "3", "cluster.id": "abcDEF123"}
