"""The import graph, read from the code: every kvstack module imports only from its own package or
from a lower layer. The layers are data here, in named groups; a new package gets a line, a new
edge a reason. (tests/unit/test_import_cycles.py reads the same imports module by module and fails
on a cycle, inside a package too.)"""

from __future__ import annotations

import ast
from pathlib import Path

import kvstack

# Lowest first: the groups, and in each group its layers, lowest first. A package may import its own
# modules and any package of a LOWER layer; the packages of one layer are siblings and import nothing
# of each other, but for the few edges SIDEWAYS names.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",  # what every layer above may use: no I/O of its own beyond files and secrets
        (
            # the version, the one exception tree, the type of a JSON object at kvstack's edges
            "kvstack errors jsonvalue",
            # leaves: names, sizes, addresses, files, secrets, where state lives
            "units names redact releases netaddr rundir fsutil userfile secretfile profiles",
            "remoteurl",  # a remote tier's URL parsed once, where it enters (addresses, secrets)
            "flags",  # a flag declared once, on the inputs model that holds it (names, help, range)
            "apikey",  # the API key, from a file (secretfile), the command line or the environment
            "connectors",  # the connector specs: read by planning, engines, validation, export, tune
        ),
    ),
    (
        "domain",  # what is served, on what, under which traffic; and the plan made of them
        (
            "model hardware traces",  # --model: one way in; probes of this machine; traffic traces
            "planning",  # pure: hardware, model and trace in, Plan out
        ),
    ),
    (
        "adapters",  # the outside world: HTTP, processes, launch specs, the Redis tier
        (
            "clients",  # HTTP clients of a served engine
            "runtime",  # process supervision (readiness probes through clients)
            "engines remote",  # Plan -> LaunchSpec renderers; the Redis tier
        ),
    ),
    (
        "checks",  # verdicts on a running server
        (
            "validation",  # its tiers serve hits, and the right KV
            "canary",  # the verdict kept while it serves (validation's gate, asked again and again)
        ),
    ),
    (
        "applications",  # the use cases, one per command (or two)
        (
            "export top",  # what writes a deployment from a plan; what reads running servers live
            "serving",  # the serve run path (validates what it starts)
            # measures a server: workloads, load sweeps, a production trace replayed on served
            # layouts (bench.replay) and the costs calibrated from it
            "bench",
            "tune",  # ranks connector x knobs on a trace (planning), then proves the best by replay
        ),
    ),
    (
        "interface",  # what the user sees and types
        (
            "rendering",  # every command's human output: tables, panels, event lines
            "cli",  # parses, calls the use case once, hands the result to rendering
            "__main__",
        ),
    ),
)
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(line.split()) for _, lines in GROUPS for line in lines)

# The imports between siblings (packages of one layer) that are allowed, each with its reason:
# (importing package or module under kvstack, imported package, why). Every other import up or
# sideways fails, and a line whose import is gone fails too (the list says what the code does).
SIDEWAYS: tuple[tuple[str, str, str], ...] = (
    ("hardware.calibrate", "model", "calibration times the prefill of a catalog model's geometry"),
)

# Listed packages that may not exist yet: their line holds their place, so their first module
# passes. (Any other listed name that names nothing is a stale line and fails.)
PENDING = {"connectors": "being added (issue 60): the connector specs, below model and planning"}

ROOT = Path(kvstack.__file__).parent


def _layer(package: str) -> int:
    for i, names in enumerate(LAYERS):
        if package in names:
            return i
    raise AssertionError(f"kvstack.{package} is in no layer: add it to GROUPS in {__file__}")


def _where(package: str) -> str:
    layer = i = _layer(package)
    for group, lines in GROUPS:
        if i < len(lines):
            return f"{group}, layer {layer}"
        i -= len(lines)
    raise AssertionError(package)  # every layer is in a group


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1].removesuffix(".py") if len(parts) > 1 else "kvstack"


def _module(rel: Path) -> str:
    """kvstack/hardware/calibrate/run.py -> hardware.calibrate.run (kvstack/x/__init__.py -> x)."""
    parts = list(rel.with_suffix("").parts[1:])
    return ".".join(parts[:-1] if parts and parts[-1] == "__init__" else parts)


def _edges() -> list[tuple[str, str, str, str]]:
    """(importing file, its module, its package, imported package) for every kvstack import in
    kvstack/ between two packages."""
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
                    out.append((str(rel), _module(rel), src, dst))
    return out


def _under(module: str, importer: str) -> bool:
    return module == importer or module.startswith(f"{importer}.")


def _allowed(module: str, dst: str) -> bool:
    return any(_under(module, importer) and dst == imported for importer, imported, _ in SIDEWAYS)


def test_every_package_has_a_layer() -> None:
    packages = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or p.is_dir()}
    packages.discard("__init__")
    packages.discard("__pycache__")
    for package in packages:
        _layer(package)


def test_every_listed_package_is_there_or_pending() -> None:
    there = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or p.is_dir()}
    listed = set().union(*LAYERS)
    listed.discard("kvstack")
    stale = sorted(listed - there - set(PENDING))
    assert not stale, f"listed in GROUPS, but no module or package of kvstack/: {stale}"
    assert set(PENDING) <= listed, "a PENDING package needs its line in GROUPS"


def test_no_import_goes_up_or_sideways() -> None:
    bad = [
        f"{path}: kvstack.{src} ({_where(src)}) imports kvstack.{dst} ({_where(dst)})"
        for path, module, src, dst in _edges()
        if _layer(dst) >= _layer(src) and src != "kvstack" and not _allowed(module, dst)
    ]
    assert not bad, "\n".join(bad)


def test_the_sideways_edges_are_between_siblings_and_in_the_code() -> None:
    # An allowed edge goes sideways, never up (an upward one is a layer in the wrong place), and
    # names an import the code still has (a gone one is a stale line).
    edges = {(module, dst) for _, module, _, dst in _edges()}
    for importer, imported, reason in SIDEWAYS:
        assert reason
        assert _layer(_package(f"kvstack.{importer}")) == _layer(imported), (importer, imported)
        used = any(_under(module, importer) and dst == imported for module, dst in edges)
        assert used, f"SIDEWAYS allows {importer} -> {imported}, which nothing imports: remove its line"


def test_the_graph_is_read_at_all() -> None:
    # A reader that found no edges would pass the test above vacuously.
    edges = {(src, dst) for _, _, src, dst in _edges()}
    assert ("cli", "serving") in edges and ("engines", "runtime") in edges and len(edges) > 60
    assert _allowed("hardware.calibrate.run", "model") and not _allowed("hardware.probe", "model")
    assert not _allowed("model", "hardware")  # an allowed edge goes one way


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


# What planning/predict/ may import of planning/: its own modules and the plan's data types. The
# choosing modules (connector, tiers, dtype, cuda_plan, assemble, plan, ...) ask predict/ for
# figures; never the other way.
PREDICT_MAY_IMPORT = {"kvstack.planning.schema", "kvstack.planning.trace_schema", "kvstack.planning.kv"}


def test_predict_imports_no_choosing_module() -> None:
    found = []
    for path in sorted((ROOT / "planning" / "predict").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = (
                    [node.module]
                    if node.module != "kvstack.planning"
                    else [f"kvstack.planning.{a.name}" for a in node.names]
                )
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [
                f"{path.name} imports {name}"
                for name in names
                if _under(name, "kvstack.planning")
                and not _under(name, "kvstack.planning.predict")
                and name not in PREDICT_MAY_IMPORT
            ]
    assert not found, found
