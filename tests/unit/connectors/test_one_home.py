"""A connector's knowledge lives in its spec (kvstack/connectors): shared code asks the spec, it does
not test names. Read from the source's syntax tree: string constants (docstrings aside) and
comparisons of a connector or an engine against a name."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from kvstack.names import CONNECTORS, ENGINES
from tests.support.deps import ROOT

PACKAGE = ROOT / "kvstack"
SPECS = PACKAGE / "connectors"
NAMES = ("lmcache-mp", "hicache", "native")
MAX_FILES_PER_NAME = 3  # outside the specs: names.py's Literal and the renderers' @register
MAX_NAME_TESTS = 5
KNOWN = {*CONNECTORS, *ENGINES}


def _modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if SPECS not in p.parents]


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def name_literals() -> dict[str, set[str]]:
    """name -> the modules outside the specs that hold it as a string constant."""
    found: dict[str, set[str]] = {n: set() for n in NAMES}
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in skip:
                found[str(node.value)].add(str(path.relative_to(ROOT)))
    return found


def _subject(node: ast.expr) -> str:
    """The last name of an expression: ``plan.connector`` -> connector."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _is_name(node: ast.expr) -> bool:
    """A connector's or engine's name, or a tuple/set/list of them (what a name test compares
    against); a module constant that names one (GATED_CONNECTOR) counts too."""
    if isinstance(node, ast.Constant):
        return node.value in KNOWN
    if isinstance(node, ast.Tuple | ast.Set | ast.List):
        return bool(node.elts) and all(_is_name(e) for e in node.elts)
    return _subject(node).isupper()  # a module constant naming one (GATED_CONNECTOR)


def name_tests() -> Counter[str]:
    """Comparisons of a connector or an engine against a name, by module."""
    out: Counter[str] = Counter()
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare) or len(node.ops) != 1:
                continue
            left, right = node.left, node.comparators[0]
            if not isinstance(node.ops[0], ast.Eq | ast.NotEq | ast.In | ast.NotIn):
                continue
            if _subject(left) in ("connector", "engine") and _is_name(right):
                out[f"{path.relative_to(ROOT)}:{node.lineno}"] += 1
    return out


def test_each_connector_name_is_written_in_few_modules_outside_its_spec() -> None:
    for name, where in name_literals().items():
        assert len(where) <= MAX_FILES_PER_NAME, f'"{name}" outside kvstack/connectors: {sorted(where)}'


def test_shared_code_asks_the_spec_instead_of_testing_names() -> None:
    tests = name_tests()
    assert sum(tests.values()) <= MAX_NAME_TESTS, sorted(tests)


def test_the_scan_sees_a_name_test_and_a_literal() -> None:
    """The readers above would catch what they forbid (a control on a written snippet)."""
    tree = ast.parse('def f(plan):\n    """hicache"""\n    return plan.connector == "hicache"\n')
    compare = next(n for n in ast.walk(tree) if isinstance(n, ast.Compare))
    assert _subject(compare.left) == "connector" and _is_name(compare.comparators[0])
    consts = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "hicache"]
    assert len(consts) == 2 and len(_docstrings(tree)) == 1
