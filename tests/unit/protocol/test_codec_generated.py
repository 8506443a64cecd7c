"""The committed protocol/schema_gen tables match a fresh run of tools/generate_schemas.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load_generator():
    spec = importlib.util.spec_from_file_location("generate_schemas",
                                                  REPO / "tools" / "generate_schemas.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _load_generator()
SPEC_DIR = GEN.default_spec_dir()


@pytest.mark.skipif(SPEC_DIR is None, reason="kafka-protocol spec directory not present")
def test_generated_tables_have_no_drift(tmp_path):
    written = GEN.generate(SPEC_DIR, tmp_path)
    committed = REPO / "protocol" / "schema_gen"
    names = sorted(p.name for p in written)
    assert names == sorted(p.name for p in committed.glob("*.py"))
    for p in written:
        assert p.read_text() == (committed / p.name).read_text(), f"{p.name} drifted; rerun " \
            "python tools/generate_schemas.py"


@pytest.mark.skipif(SPEC_DIR is None, reason="kafka-protocol spec directory not present")
def test_every_spec_file_is_in_the_tables():
    from protocol.schema_gen import SCHEMAS

    files = []
    for sub in ("messages", "messages-4.2", "coordinator-records", "coordinator-records-4.2"):
        files += list((SPEC_DIR / sub).glob("*.json"))
    # 4.2 renamed api key 74 (ListClientMetricsResources v0 is ListConfigResources v0)
    renamed = {"ListClientMetricsResourcesRequest", "ListClientMetricsResourcesResponse"}
    assert {f.stem for f in files} - renamed == set(SCHEMAS)


def _spec_sets(older: str, newer: str, coordinator: bool):
    return (GEN.load_dir(SPEC_DIR / older, coordinator),
            GEN.load_dir(SPEC_DIR / newer, coordinator))


@pytest.mark.skipif(SPEC_DIR is None, reason="kafka-protocol spec directory not present")
@pytest.mark.parametrize("older,newer,coordinator", [
    ("messages", "messages-4.2", False),
    ("coordinator-records", "coordinator-records-4.2", True)])
def test_every_version_reads_as_its_spec_set(older, newer, coordinator):
    """The committed tables against both spec sets: each version below the 4.2 set's lowest
    reads exactly as `messages/` defines it, every other one as `messages-4.2/` does."""
    from protocol.schema_gen import SCHEMAS

    old, new = _spec_sets(older, newer, coordinator)
    checked = 0
    for key in set(old) | set(new):
        o, n = old.get(key), new.get(key)
        table = SCHEMAS[(n if n and n["valid"] else o)["name"]]
        lo, hi = table["valid"]
        split = n["valid"][0] if n and n["valid"] else hi + 1
        if o and o["valid"]:
            assert lo == min(o["valid"][0], split), table["name"]
        assert hi == max(x["valid"][1] for x in (o, n) if x and x["valid"]), table["name"]
        for v in range(lo, hi + 1):
            src = n if v >= split else o
            assert GEN.version_view(table, v) == GEN.version_view(src, v), f"{table['name']} v{v}"
            checked += 1
    assert checked > (50 if coordinator else 700), checked


def test_union_keeps_old_versions_and_takes_new_ones():
    old = {"name": "XRequest", "kind": "request", "api_key": 0, "valid": (0, 3),
           "flexible": (2, GEN.MAX_VERSION), "deprecated": (0, 1), "unstable": False,
           "common": {},
           "fields": (("A", "int32", (0, 0), None, None, None, None, False, False, None, None),
                      ("B", "string", (0, GEN.MAX_VERSION), None, None, None, None, False, False,
                       None, None))}
    new = dict(old, valid=(2, 4), deprecated=None, unstable=True,
               fields=(("B", "string", (2, GEN.MAX_VERSION), (4, GEN.MAX_VERSION), None, None,
                        None, False, False, None, None),
                       ("C", "int8", (4, GEN.MAX_VERSION), None, None, None, None, False,
                        False, None, None)))
    m = GEN.merge_message(old, new)
    assert m["valid"] == (0, 4) and m["deprecated"] == (0, 1) and m["unstable"]
    assert [(f[0], f[2], f[3]) for f in m["fields"]] == [
        ("A", (0, 0), None), ("B", (0, GEN.MAX_VERSION), (4, GEN.MAX_VERSION)),
        ("C", (4, GEN.MAX_VERSION), None)]
    GEN.check_union(m, old, new)
    clash = dict(new, fields=(("B", "int32", (2, GEN.MAX_VERSION), None, None, None, None,
                               False, False, None, None),))
    with pytest.raises(GEN.MergeError):
        GEN.merge_message(old, clash)


def test_strip_comments_keeps_slashes_inside_strings():
    text = '{"a": "http://x//y", // comment "b"\n "c": "\\"//"} // tail'
    assert GEN.strip_comments(text) == '{"a": "http://x//y", \n "c": "\\"//"} '


def test_parse_versions():
    assert GEN.parse_versions("3+") == (3, 0x7FFF)
    assert GEN.parse_versions("0-2") == (0, 2)
    assert GEN.parse_versions("5") == (5, 5)
    assert GEN.parse_versions("none") is None


def test_no_about_prose_is_copied():
    for p in (REPO / "protocol" / "schema_gen").glob("*.py"):
        assert "about" not in p.read_text()
