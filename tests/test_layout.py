"""The dependency rule of the package layout (docs/DEVELOPING.md, "Dependency rule"), checked on the source.

Every import of a chipswap module, at the top of a file or inside a function (lazy imports count: they run
too), is read from the syntax tree. The rule:
- a package may import only packages in a LOWER layer of LAYERS (never one beside it or above it), so the
  stages (plan/), the report (report/) and the command line (cli/) are never imported by a capability;
- no import cycle between modules, anywhere.
A new top-level module or package must be given a layer here before its first import passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. A package may import from the layers below its own, never from its own layer's other packages.
LAYERS: dict[str, int] = {
    "chipswap": 0,  # the package root (__version__)
    "data": 0,
    "errors": 0,
    "textsafe": 0,
    "atomic": 1,
    "datafile": 1,
    "nativeguard": 1,  # issue 19: the .pt2 native-code scan (models reads .pt2 files)
    "deadline": 1,  # issue 19: check --timeout (models, readiness and cli use it)
    "ranges": 1,  # issue 32: the physical range of every unit (workload, flags, bench files, catalogs)
    "models": 2,
    "shapes": 2,
    "simulation": 2,
    "verdict": 2,
    "traffic": 3,
    "readiness": 3,
    "economics": 3,
    "compile": 3,
    "projection": 4,
    "serve": 4,
    "bench": 5,
    "plan": 6,
    "report": 6,
    "trial": 6,  # `chipswap trial`: renders the kit from a PlanResult (read as data, plan/ not imported)
    "cli": 7,
    "__main__": 8,
}
TOP_ONLY = ("plan", "report", "cli", "__main__")  # what no capability may import

# The pure cores (each package's __init__ names them): no files, clock, network or torch. They import only
# each other, chipswap.errors / chipswap.textsafe, and nothing from this list.
PURE_CORES = {
    "chipswap.shapes.histogram",
    "chipswap.shapes.costmodel",
    "chipswap.shapes.buckets",
    "chipswap.shapes.baselines",
    "chipswap.readiness.rules",
    "chipswap.projection.work",
    "chipswap.projection.hfconfig",
    "chipswap.projection.platform",
    "chipswap.projection.predict",
    "chipswap.projection.predict_encoder",
    "chipswap.projection.projected",
    "chipswap.projection.search_common",
    "chipswap.projection.layouts",
    "chipswap.projection.stacks",
    "chipswap.projection.training.model",
    "chipswap.projection.training.layout",
    "chipswap.projection.training.transfer",
    "chipswap.projection.fitting",
    "chipswap.projection.fitting.tables",
    "chipswap.projection.serving",
    "chipswap.projection.serving.physics",
    "chipswap.projection.serving.coverage",
    "chipswap.projection.serving.moe",
    "chipswap.simulation.servicetime",
    "chipswap.simulation.simulate",
    "chipswap.simulation.engine",
    "chipswap.simulation.steps",
    "chipswap.simulation.policies",
    "chipswap.simulation.model",
    "chipswap.simulation.traffic",
    "chipswap.simulation.encoder",
    "chipswap.simulation.validation",
    "chipswap.trial.spec",
    "chipswap.trial.launch",
    "chipswap.trial.benchscript",
    "chipswap.trial.costing",
    "chipswap.trial.fleet",
    "chipswap.simulation.fleet",
    "chipswap.economics.money",
    "chipswap.economics.catalog",
    "chipswap.economics.cost",
    "chipswap.economics.capacity",
    "chipswap.verdict.rules",
    "chipswap.verdict.sensitivity",
}
NOT_IN_A_PURE_CORE = (
    "torch", "transformers", "jax", "onnx", "onnxruntime", "duckdb", "pyarrow", "boto3", "botocore", "httpx",
    "fastapi", "uvicorn", "matplotlib", "subprocess", "socket", "urllib", "shutil", "tempfile",
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "chipswap").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module an import names (a `from pkg import submodule` names the submodule)."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def _imports(path: Path) -> set[tuple[str, int]]:
    """(imported chipswap module, line) for every import statement in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        module = getattr(node, "module", None) or ""
        if isinstance(node, ast.ImportFrom) and node.level == 0 and module.startswith("chipswap"):
            for alias in node.names:
                full = f"{module}.{alias.name}"
                found.add((full if full in MODULES else _resolve(module), node.lineno))
        elif isinstance(node, ast.Import):
            found |= {(_resolve(a.name), node.lineno) for a in node.names if a.name.startswith("chipswap")}
    return found


GRAPH = {mod: _imports(path) for mod, path in MODULES.items()}


def _external_imports(path: Path) -> set[str]:
    """Top-level names of the non-chipswap modules a file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
    return found - {"chipswap"}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_every_package_has_a_layer() -> None:
    missing = sorted({_package(m) for m in MODULES} - set(LAYERS))
    assert not missing, f"give these a layer in tests/test_layout.py LAYERS: {missing}"


def test_no_import_cycles() -> None:
    edges = {mod: {target for target, _ in deps if target != mod} for mod, deps in GRAPH.items()}
    assert _cycles(edges) == []


def test_imports_only_go_down_the_layers() -> None:
    upward = []
    for mod, deps in GRAPH.items():
        src = _package(mod)
        for target, line in sorted(deps):
            dst = _package(target)
            if dst != src and LAYERS.get(dst, 99) >= LAYERS.get(src, -1):
                upward.append(f"{MODULES[mod].relative_to(SRC)}:{line} imports {target}")
    assert upward == []


def test_no_capability_imports_plan_report_or_cli() -> None:
    bad = [
        f"{mod} -> {target}"
        for mod, deps in GRAPH.items()
        for target, _ in deps
        if _package(target) in TOP_ONLY and _package(mod) not in TOP_ONLY
    ]
    assert bad == []


def test_pure_cores_stay_pure() -> None:
    assert PURE_CORES <= set(MODULES), sorted(PURE_CORES - set(MODULES))
    allowed = PURE_CORES | {"chipswap.errors", "chipswap.textsafe"}
    bad = [
        f"{mod} imports {name}"
        for mod in sorted(PURE_CORES)
        for name in sorted(
            {t for t, _ in GRAPH[mod] if t not in allowed}
            | (_external_imports(MODULES[mod]) & set(NOT_IN_A_PURE_CORE))
        )
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_cycles(edges: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(edges) == expected


def test_an_upward_import_is_seen(tmp_path: Path) -> None:
    """The reader sees lazy imports inside functions and `from package import submodule`."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from chipswap import plan\n    from chipswap.plan import setup\n")
    assert {t for t, _ in _imports(probe)} == {"chipswap.plan", "chipswap.plan.setup"}
