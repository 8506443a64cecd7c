"""broker.server tunes Python's cyclic GC once per process after startup (see
broker.server._tune_gc_once for the measurement behind it)."""

import gc
import warnings

import broker.server as server


def test_gc_tuned_once_after_startup(monkeypatch):
    # earlier tests in this process may leave unclosed client sockets for the collector:
    # collect them here, silently, so _tune_gc_once's gc.collect() only sees this test's objects
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    saved = gc.get_threshold()
    monkeypatch.setattr(server, "_GC_TUNED", False)
    try:
        server._tune_gc_once()
        assert gc.get_threshold() == (50_000, 20, 100)
        assert gc.get_freeze_count() > 0  # startup objects moved to the permanent generation
        gc.set_threshold(700, 10, 10)
        server._tune_gc_once()  # a second server in the same process changes nothing
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
