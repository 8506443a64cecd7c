"""EmbeddedMetadataStore: ZooKeeper-like semantics, atomic multi, durability across reopen."""

import json
import os

import pytest

from controller.metadata_store import (
    FILE_NAME,
    BadVersionError,
    Check,
    Create,
    Delete,
    EmbeddedMetadataStore,
    MetadataStoreCorruptError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetData,
)


async def open_store(path) -> EmbeddedMetadataStore:
    store = EmbeddedMetadataStore(str(path))
    await store.open()
    return store


async def test_create_get_set_delete_and_versions(tmp_path):
    s = await open_store(tmp_path)
    assert s.exists("/a") is None
    with pytest.raises(NoNodeError):
        await s.create("/a/b", b"x")
    assert await s.create("/a/b", b"x", make_parents=True) == "/a/b"
    data, stat = s.get("/a/b")
    assert data == b"x" and stat.version == 0
    with pytest.raises(NodeExistsError):
        await s.create("/a/b")
    st = await s.set_data("/a/b", b"y", expected_version=0)
    assert st.version == 1 and s.get_data("/a/b") == b"y"
    with pytest.raises(BadVersionError):
        await s.set_data("/a/b", b"z", expected_version=0)
    assert s.get_data("/a/b") == b"y"
    assert s.get_children("/a") == ["b"]
    with pytest.raises(NotEmptyError):
        await s.delete("/a")
    await s.delete("/a", recursive=True)
    assert s.exists("/a") is None and s.exists("/a/b") is None
    assert s.get_children("/") == []


async def test_multi_is_atomic(tmp_path):
    s = await open_store(tmp_path)
    await s.create("/x", b"1")
    zxid = s.zxid
    with pytest.raises(BadVersionError):
        await s.multi([Create("/y", b"2"), SetData("/x", b"3"), Check("/x", 0)])
    assert s.exists("/y") is None and s.get_data("/x") == b"1" and s.zxid == zxid
    s2 = await open_store(tmp_path)
    assert s2.exists("/y") is None
    await s.multi([Create("/y", b"2"), Delete("/x"), Delete("/nope", must_exist=False)])
    assert s.get_data("/y") == b"2" and s.exists("/x") is None and s.zxid == zxid + 1


async def test_sequential_nodes(tmp_path):
    s = await open_store(tmp_path)
    p1 = await s.create("/config/changes/config_change_", b"{}", make_parents=True,
                        sequential=True)
    p2 = await s.create("/config/changes/config_change_", b"{}", sequential=True)
    assert p1 == "/config/changes/config_change_0000000000"
    assert p2 == "/config/changes/config_change_0000000001"
    await s.delete(p1)
    p3 = await s.create("/config/changes/config_change_", b"{}", sequential=True)
    assert p3.endswith("0000000002")


async def test_persists_across_reopen(tmp_path):
    s = await open_store(tmp_path)
    await s.create("/brokers/topics/t", b'{"version":3}', make_parents=True)
    await s.set_data("/brokers/topics/t", b'{"version":3,"x":1}')
    await s.create("/controller_epoch", b"5")
    await s.delete("/brokers/topics/t")
    await s.create("/brokers/topics/u", "é".encode(), make_parents=True)
    s2 = await open_store(tmp_path)
    assert s2.zxid == s.zxid
    assert s2.get_data("/controller_epoch") == b"5"
    assert s2.exists("/brokers/topics/t") is None
    assert s2.get_data("/brokers/topics/u") == "é".encode()
    assert s2.get_children("/brokers/topics") == ["u"]
    assert s2.get("/brokers/topics/u")[1] == s.get("/brokers/topics/u")[1]
    assert not os.path.exists(tmp_path / (FILE_NAME + ".tmp"))
    on_disk = json.loads((tmp_path / FILE_NAME).read_text())
    assert on_disk["format"] == "josef-metadata" and "/controller_epoch" in on_disk["znodes"]


async def test_leftover_tmp_is_ignored_and_corrupt_file_is_reported(tmp_path):
    s = await open_store(tmp_path)
    await s.create("/a", b"1")
    (tmp_path / (FILE_NAME + ".tmp")).write_bytes(b'{"torn')
    s2 = await open_store(tmp_path)
    assert s2.get_data("/a") == b"1"
    (tmp_path / FILE_NAME).write_bytes(b'{"torn')
    with pytest.raises(MetadataStoreCorruptError, match=FILE_NAME):
        await open_store(tmp_path)
    (tmp_path / FILE_NAME).write_text('{"format":"other"}')
    with pytest.raises(MetadataStoreCorruptError):
        await open_store(tmp_path)


async def test_rejects_bad_paths_and_binary_data(tmp_path):
    s = await open_store(tmp_path)
    for bad in ("a", "/a/", "/a//b", "/a/./b", "/.."):
        with pytest.raises(ValueError):
            await s.create(bad)
    with pytest.raises(ValueError):
        await s.create("/bin", b"\xff\xfe")
    assert s.get_children("/") == []
