"""broker.handlers.load_all: every listed handler module is imported; a missing one raises."""

import sys

import pytest

import broker.handlers as handlers


def test_load_all_imports_every_handler_module():
    handlers.load_all()
    assert all(f"broker.handlers.{name}" in sys.modules for name in handlers.HANDLER_MODULES)


def test_load_all_raises_for_a_missing_module(monkeypatch):
    monkeypatch.setattr(handlers, "HANDLER_MODULES",
                        [*handlers.HANDLER_MODULES, "no_such_handler_module"])
    with pytest.raises(ModuleNotFoundError, match="no_such_handler_module"):
        handlers.load_all()
