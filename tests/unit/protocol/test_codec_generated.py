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

    files = list((SPEC_DIR / "messages").glob("*.json"))
    files += list((SPEC_DIR / "coordinator-records").glob("*.json"))
    assert {f.stem for f in files} == set(SCHEMAS)


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
