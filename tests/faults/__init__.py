"""Fault injection for Josef: a Jepsen-style harness (``run``) and a protocol fuzzer (``fuzz``).

Run from the repository root: ``python -m tests.faults run ...`` / ``python -m tests.faults
fuzz ...`` (see ``tests/faults/README.md``).
"""
