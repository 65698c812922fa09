"""No import cycle among kvstack's modules, inside a package or across packages.

The graph is read from the code, module by module: every ``import`` and ``from ... import`` of every
module of kvstack/ (at the top, inside a function, under ``TYPE_CHECKING``), resolved to the kvstack
module it loads; ``from kvstack.pkg import name`` where ``name`` is a submodule imports that
submodule, else the package (its ``__init__``). A lazy import inside a function hides a cycle from
Python's start-up, not from this test: the shared piece moves down to the module that owns it.
(tests/unit/test_layers.py checks the same imports package by package, against the layers.)"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path

import kvstack

ROOT = Path(kvstack.__file__).parent

# Cycles left as they are, each with its reason: the set of modules in the cycle (its strongly
# connected component, exactly) -> why it stays. Keep it short; a cycle fixed is a line removed.
KNOWN_CYCLES: dict[frozenset[str], str] = {}

Graph = Mapping[str, Mapping[str, int]]  # module -> {imported module: the line of its first import}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The kvstack module ``name`` loads: itself, or the nearest package above it that exists."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        out: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x, from ..a import b
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                if base != "kvstack" and not base.startswith("kvstack."):
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in modules else _resolve(base, modules)
                    if target:
                        out.setdefault(target, node.lineno)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "kvstack" or alias.name.startswith("kvstack."):
                        target = _resolve(alias.name, modules)
                        if target:
                            out.setdefault(target, node.lineno)
        out.pop(module, None)
        graph[module] = out
    return graph


def components(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds a cycle), by Tarjan's
    algorithm without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((w for w in edges if w in graph), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def cycle_in(component: list[str], graph: Graph) -> list[str]:
    """One cycle through the component's first module, shortest first: [a, b, ..., a]."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node]):
            if nxt == start:
                return [*paths[node], start]
            if nxt in members and nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} in {component}")


def _describe(cycle: list[str], graph: Graph) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in pairwise(cycle)]
    return " -> ".join([*steps, cycle[-1]])


def test_no_import_cycle() -> None:
    graph = import_graph()
    found = components(graph)
    bad = [_describe(cycle_in(c, graph), graph) for c in found if frozenset(c) not in KNOWN_CYCLES]
    shown = "\n".join(bad)
    assert not bad, f"import cycles (each line number is an import in the module before its arrow):\n{shown}"
    gone = [sorted(c) for c in KNOWN_CYCLES if sorted(c) not in found]
    assert not gone, f"KNOWN_CYCLES lists cycles the code no longer has: remove their lines: {gone}"
    assert all(KNOWN_CYCLES.values()), "every known cycle has its reason"


def test_the_graph_is_read_at_all() -> None:
    # A reader that found no edges would pass the test above vacuously.
    graph = import_graph()
    assert len(graph) > 200 and sum(map(len, graph.values())) > 1000
    assert "kvstack.bench.bench" in graph["kvstack.cli.bench"]  # an import inside a function
    assert "kvstack.hardware.nvml" in graph["kvstack.hardware.gpu"]  # from a package, a submodule
    assert "kvstack.errors" in graph["kvstack.flags"]  # from a module, a name
    assert "kvstack.serving.lifecycle" in graph["kvstack.rendering.tune_progress"]  # under TYPE_CHECKING


def test_a_cycle_is_found_and_shown() -> None:
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}, "e": {"e": 2, "d": 4}}
    assert components(graph) == [["a", "b", "c"]]
    assert _describe(cycle_in(["a", "b", "c"], graph), graph) == "a (line 3) -> b (line 5) -> c (line 7) -> a"
    assert components({"a": {"b": 1}, "b": {}}) == []
