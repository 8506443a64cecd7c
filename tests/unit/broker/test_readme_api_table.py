"""The README's protocol-versions table is the handler registry (what ApiVersions
advertises), and nothing the registry serves is outside the codec's versions."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import broker.handlers as handlers
from broker.handlers.registry import REGISTRY
from protocol.api import API_KEYS

README = Path(__file__).resolve().parents[3] / "README.md"
# not served: streams groups, KRaft's controller APIs
NEVER_ADVERTISED = {52, 53, 54, 55, 58, 59, 62, 63, 64, 67, 70, 73, 80, 81, 82, 88, 89}


def _registry() -> dict[int, tuple[int, int]]:
    for m in pkgutil.iter_modules(handlers.__path__):
        importlib.import_module(f"broker.handlers.{m.name}")
    return {k: (lo, hi) for k, lo, hi in REGISTRY.supported()}


def _readme_table() -> dict[int, tuple[str, int, int]]:
    text = README.read_text()
    body = text[text.index("<!-- api-table:start -->"):text.index("<!-- api-table:end -->")]
    out = {}
    for key, name, versions in re.findall(r"^\| (\d+) \| (\w+) \| ([\d-]+) \|$", body, re.M):
        lo, _, hi = versions.partition("-")
        out[int(key)] = (name, int(lo), int(hi or lo))
    return out


def test_readme_table_is_the_registry():
    registry = _registry()
    table = _readme_table()
    assert {k: (lo, hi) for k, (_, lo, hi) in table.items()} == registry
    assert {k: name for k, (name, _, _) in table.items()} == \
        {k: API_KEYS[k].name for k in registry}


def test_advertised_ranges_are_in_the_codec_and_reach_kafka_42():
    registry = _registry()
    for key, (lo, hi) in registry.items():
        spec = API_KEYS[key]
        assert spec.min_version <= lo <= hi <= spec.max_version, spec.name
    # client-facing APIs are served up to the newest version of the specs
    inter_broker = {4, 5, 6, 7, 27, 56, 57}
    for key, (_lo, hi) in registry.items():
        if key not in inter_broker:
            assert hi == API_KEYS[key].max_version, API_KEYS[key].name
    assert not NEVER_ADVERTISED & set(registry)
