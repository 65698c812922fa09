"""The import graph, read from the code: every kvstack module imports only from its own package or
from a lower layer. The layers are data here; a new package gets a line, a new edge a reason."""

from __future__ import annotations

import ast
from pathlib import Path

import kvstack

# Lowest first. A package may import its own modules and any package of a LOWER layer; packages of
# one layer are siblings and import nothing of each other.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names.split())
    for names in (
        "kvstack errors",  # the version and the one exception tree
        # leaves: names, sizes, addresses, files, secrets, where state lives
        "units names redact releases netaddr rundir fsutil userfile secretfile profiles",
        "flags",  # a flag declared once, on the inputs model that holds it (names, help, range)
        "apikey",  # the API key, from a file (secretfile), the command line or the environment
        "model",  # --model: one way in
        "hardware traces",  # probes; traffic traces
        "planning",  # pure: hardware, model and trace in, Plan out
        "clients",  # HTTP clients of a served engine
        "runtime",  # process supervision (readiness probes through clients)
        "engines remote",  # Plan -> LaunchSpec renderers; the Redis tier
        "validation",  # the verdict on a running server: its tiers serve hits, and the right KV
        "canary",  # the verdict kept while it serves (validation's gate, asked again and again)
        "export top",  # what reads a running launch or writes a deployment
        "serving",  # the serve run path (validates what it starts)
        "bench",  # serves layouts to measure them
        "replay",  # a production trace replayed on served layouts; the costs calibrated from it
        "tune",  # ranks connector x knobs on a trace (planning), then proves the best by replay
        "rendering",  # every command's human output: tables, panels, event lines
        "cli",  # parses, calls the use case once, hands the result to rendering
        "__main__",
    )
)
ROOT = Path(kvstack.__file__).parent


def _layer(package: str) -> int:
    for i, names in enumerate(LAYERS):
        if package in names:
            return i
    raise AssertionError(f"kvstack.{package} is in no layer: add it to LAYERS in {__file__}")


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1].removesuffix(".py") if len(parts) > 1 else "kvstack"


def _edges() -> list[tuple[str, str, str]]:
    """(importing file, its package, imported package) for every kvstack import in kvstack/."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        src = rel.parts[1].removesuffix(".py") if len(rel.parts) > 1 else "kvstack"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvstack"):
                from_root = node.module == "kvstack"
                targets = [f"kvstack.{a.name}" for a in node.names] if from_root else [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("kvstack")]
            else:
                continue
            for target in targets:
                dst = _package(target)
                if dst == "__version__":
                    dst = "kvstack"
                if dst != src:
                    out.append((str(rel), src, dst))
    return out


def test_every_package_has_a_layer() -> None:
    packages = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or p.is_dir()}
    packages.discard("__init__")
    packages.discard("__pycache__")
    for package in packages:
        _layer(package)


def test_no_import_goes_up_or_sideways() -> None:
    bad = [
        f"{path}: kvstack.{src} (layer {_layer(src)}) imports kvstack.{dst} (layer {_layer(dst)})"
        for path, src, dst in _edges()
        if _layer(dst) >= _layer(src) and src != "kvstack"
    ]
    assert not bad, "\n".join(bad)


def test_the_graph_is_read_at_all() -> None:
    # A reader that found no edges would pass the test above vacuously.
    edges = {(src, dst) for _, src, dst in _edges()}
    assert ("cli", "serving") in edges and ("engines", "runtime") in edges and len(edges) > 60


# What planning may not import: file readers (planning is pure; its callers read and pass data).
READERS = {
    "yaml",
    "kvstack.userfile",
    "kvstack.model.catalog",
    "kvstack.model.hub",
    "kvstack.model.local",
    "kvstack.profiles",
}


def test_planning_reads_no_files() -> None:
    found = []
    for path in sorted((ROOT / "planning").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in READERS:
                found.append(f"{path.name} imports {node.module}")
            elif isinstance(node, ast.Import):
                found += [f"{path.name} imports {a.name}" for a in node.names if a.name in READERS]
            elif isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in ("open", "read_text", "read_bytes"):
                    found.append(f"{path.name}:{node.lineno} calls {name}")
    assert not found, found
