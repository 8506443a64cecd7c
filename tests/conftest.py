"""Suite-wide: every test under tests/integration/ and tests/faults/ is marked ``slow`` (it
starts brokers, ZooKeeper, a JVM or a browser), so ``python3 -m pytest -m "not slow"`` runs
the unit tests alone: the quick subset the README offers next to the full suite."""

from __future__ import annotations

from pathlib import Path

import pytest

_SLOW_DIRS = tuple(str(Path(__file__).resolve().parent / d) for d in ("integration", "faults"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if str(item.path).startswith(_SLOW_DIRS):
            item.add_marker(pytest.mark.slow)
