"""The house rules of issue 23, read from the code's own imports.

Every non-test module of the tree (every ``*.py`` outside ``tests/`` and hidden directories)
is parsed with ``ast``; every ``import`` and ``from ... import`` counts, at any depth
(function-level imports too, and those under ``if TYPE_CHECKING:``: a type that names its
host is the same circle in the design, only hidden from the interpreter). ``from a.b import
c`` is an edge to ``a.b`` and, when ``a.b.c`` is a module, to it as well; a name that is no
module of the tree (the standard library, third-party packages) is no edge.

- no import circle (a strongly connected component of more than one module) anywhere;
- the one-way arrows between rooms (``ALLOWED``, the README's code map): in particular
  ``client/``, ``cli/`` and ``coordinator/`` import no ``broker`` module (issue 23);
- no hand-written module over 700 lines (generated ones say "Do not edit" in their header).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 700
SKIP_DIRS = {"tests", "node_modules", "build", "dist", "venv", "__pycache__"}

#: room -> the rooms it may import: the arrows of the README's code map (issue 23). Rooms not
#: listed (benchmarks/, tools/, examples/) are users of the product, not part of it.
ALLOWED = {
    "broker": {"coordinator", "controller", "storage", "client", "common", "protocol", "cli"},
    "cli": {"console", "client", "common", "protocol", "controller", "coordinator", "storage"},
    "console": {"client", "common"},
    "connectors": {"client", "common", "protocol"},
    "controller": {"client", "common", "protocol"},
    "coordinator": {"storage", "common", "protocol"},
    "client": {"common", "protocol"},
    "storage": {"common", "protocol"},
    "protocol": set(),
    "common": set(),
}
#: Imports against the map allowed one by one (none: keep it that way).
KNOWN_AGAINST_THE_MAP: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every non-test module of the tree."""
    out: dict[str, Path] = {}
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in SKIP_DIRS)
        for f in files:
            if not f.endswith(".py"):
                continue
            path = Path(d) / f
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            elif name == "__init__":
                continue
            out[name] = path
    return out


class _Imports(ast.NodeVisitor):
    """The dotted names one module imports (with ``from`` targets as ``base.name``)."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.names: list[tuple[str, int]] = []

    def visit_Import(self, node: ast.Import) -> None:
        self.names += [(a.name, node.lineno) for a in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        self.names.append((base, node.lineno))
        self.names += [(f"{base}.{a.name}", node.lineno) for a in node.names]


def _graph() -> tuple[dict[str, dict[str, int]], dict[str, Path]]:
    """module -> {imported module of the tree: first line importing it}."""
    mods = _modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for m, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        visitor = _Imports(m if path.name == "__init__.py" else m.rpartition(".")[0])
        visitor.visit(tree)
        for name, line in visitor.names:
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != m:
                graph[m].setdefault(name, line)
    return graph, mods


def _circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def _cycle_path(graph: dict[str, dict[str, int]], comp: list[str]) -> str:
    """One concrete loop through the component, for the failure message."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [start]
                    node = v
                    while node != start:
                        path.append(node)
                        node = prev[node]
                    path = [start] + list(reversed(path[1:])) + [start]
                    return " -> ".join(path)
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return " <-> ".join(comp)


GRAPH, MODULES = _graph()


def test_the_walk_sees_the_rooms():
    """A broken walk would pass every rule below: check it finds what we know is there."""
    rooms = {m.split(".")[0] for m in MODULES}
    assert {"broker", "client", "cli", "common", "coordinator", "protocol", "storage",
            "controller"} <= rooms
    assert "coordinator.runtime" in GRAPH["coordinator.share.share_coordinator"]
    assert any(m.startswith("protocol.") for m in GRAPH["broker.server"])


def test_circles_are_found_and_named():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}, "e": {}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _cycle_path(graph, ["a", "b", "c"]) == "a -> b -> c -> a"


def test_every_import_counts():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x.y\n"
                     "def f():\n    from . import w\n    from ..v import u\n")
    v = _Imports("pkg.sub")
    v.visit(tree)
    names = {n for n, _ in v.names}
    assert {"x.y", "pkg.sub", "pkg.sub.w", "pkg.v", "pkg.v.u"} <= names


def test_no_import_circle():
    circles = _circles(GRAPH)
    assert not circles, "import circles:\n" + "\n".join(
        f"  {{{', '.join(c)}}}, e.g. {_cycle_path(GRAPH, c)}" for c in circles)


def test_rooms_import_one_way():
    bad = []
    for m, targets in sorted(GRAPH.items()):
        room = m.split(".")[0]
        if room not in ALLOWED:
            continue
        for t, line in sorted(targets.items()):
            to = t.split(".")[0]
            if to != room and to not in ALLOWED[room] and (m, t) not in KNOWN_AGAINST_THE_MAP:
                bad.append(f"  {MODULES[m].relative_to(ROOT)}:{line}: {m} imports {t}")
    assert not bad, "imports against the arrows of the code map (README):\n" + "\n".join(bad)


def test_no_client_cli_or_coordinator_module_imports_broker():
    """Issue 23's own words, kept as a rule of its own whatever ``ALLOWED`` becomes."""
    bad = [f"{m} imports {t}" for m, targets in sorted(GRAPH.items()) for t in targets
           if m.split(".")[0] in ("client", "cli", "coordinator") and t.split(".")[0] == "broker"]
    assert not bad, "\n".join(bad)


def _generated(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        head = f.read(400)
    return "do not edit" in head.lower()


def test_no_hand_written_module_over_700_lines():
    big = []
    for path in sorted(MODULES.values()):
        if _generated(path):
            continue
        with path.open(encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            big.append(f"  {path.relative_to(ROOT)}: {n} lines")
    assert not big, f"modules over {MAX_LINES} lines (split them along their jobs):\n" + \
        "\n".join(big)
