"""EmbeddedMetadataStore: ZooKeeper-like semantics, atomic multi, durability across reopen."""

import json
import os

import pytest

from controller.metadata_store import (
    FILE_NAME,
    LEGACY_FILE_NAME,
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
    read_znodes,
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
    on_disk = read_znodes(str(tmp_path))
    assert on_disk["/controller_epoch"]["data"] == "5" and "/brokers/topics/t" not in on_disk
    await s.close()
    await s2.close()


async def test_corrupt_database_is_reported(tmp_path):
    s = await open_store(tmp_path)
    await s.create("/a", b"1")
    await s.close()
    for name in os.listdir(tmp_path):
        os.unlink(tmp_path / name)
    (tmp_path / FILE_NAME).write_bytes(b"not a database" * 100)
    with pytest.raises(MetadataStoreCorruptError, match=FILE_NAME):
        await open_store(tmp_path)


async def test_version_1_json_file_is_imported(tmp_path):
    (tmp_path / LEGACY_FILE_NAME).write_text(json.dumps({
        "format": "josef-metadata", "version": 1, "zxid": 7, "znodes": {
            "/brokers": {"data": None, "version": 0, "czxid": 1, "mzxid": 1, "cversion": 1},
            "/brokers/topics": {"data": None, "version": 0, "czxid": 1, "mzxid": 1,
                                "cversion": 1},
            "/brokers/topics/t": {"data": "{}", "version": 2, "czxid": 3, "mzxid": 7,
                                  "cversion": 0}}}))
    s = await open_store(tmp_path)
    assert s.zxid == 7 and s.get_data("/brokers/topics/t") == b"{}"
    assert s.get("/brokers/topics/t")[1].version == 2
    assert s.get_children("/brokers/topics") == ["t"]
    assert (tmp_path / (LEGACY_FILE_NAME + ".migrated")).exists()
    await s.create("/x")
    await s.close()
    s2 = await open_store(tmp_path)
    assert s2.zxid == 8 and s2.get_children("/") == ["brokers", "x"]
    await s2.close()


async def test_rejects_bad_paths_and_binary_data(tmp_path):
    s = await open_store(tmp_path)
    for bad in ("a", "/a/", "/a//b", "/a/./b", "/.."):
        with pytest.raises(ValueError):
            await s.create(bad)
    with pytest.raises(ValueError):
        await s.create("/bin", b"\xff\xfe")
    assert s.get_children("/") == []
