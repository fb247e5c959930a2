"""The package's imports point down its layers and form no cycle (docs/architecture.md, "Layers").

Every import counts, at the top of a module or inside a function (a late import
is still a dependency); only those under ``if TYPE_CHECKING:`` are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "avatar_metrics"

# lowest first; a module may import its own layer and those below, never one above
LAYERS = [
    ("foundation", ["version", "errors", "kernels", "kernels.*", "stats", "outputs", "plots"]),
    ("configuration types", ["config"]),
    ("inputs", ["io", "positions", "summaries", "schema"]),
    ("engine", ["engine", "engine.*"]),
    ("metrics", ["metrics.*"]),
    ("registry", ["metrics"]),
    ("report and page", ["configure", "report", "html", "records_table", "tracking"]),
    ("library", ["api", "holdout", "synth"]),
    ("entry points", ["", "cli", "databricks", "__main__", "jvm_archive", "archive_builder"]),
]


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (relative to the package, '' for the package)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
    here = name.split(".") if name else []
    if path.name != "__init__.py":
        here = here[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "avatar_metrics"]
            targets = [t.removeprefix("avatar_metrics").lstrip(".") for t in targets]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] + ([node.module] if node.module else [])
                prefix = ".".join(base)
            elif (node.module or "").split(".")[0] == "avatar_metrics":
                prefix = node.module.removeprefix("avatar_metrics").lstrip(".")
            else:
                continue
            targets = [f"{prefix}.{a.name}".lstrip(".") if f"{prefix}.{a.name}".lstrip(".") in known else prefix
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t not in known and t:
                t = t.rpartition(".")[0]
            if t != name:
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def layer_of(name: str) -> int:
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            if m == name or (m.endswith(".*") and name.startswith(m[:-1])):
                return i
    raise AssertionError(f"module avatar_metrics.{name} has no layer: add it to LAYERS")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_imports_point_down_the_layers():
    upward = [f"{a or 'avatar_metrics'} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
              for a, deps in graph().items() for b in deps if layer_of(b) > layer_of(a)]
    assert upward == []


@pytest.mark.parametrize("edges,want", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(edges, want):
    assert cycles(edges) == want


def test_the_parser_sees_late_and_relative_imports(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("from typing import TYPE_CHECKING\nfrom ..engine import search\nimport numpy\n"
                   "if TYPE_CHECKING:\n    from ..api import evaluate\n"
                   "def f():\n    from .. import metrics as declared\n    from ..config import Config\n"
                   "    import avatar_metrics.engine\n")
    known = {"engine", "engine.search", "api", "metrics", "config", "metrics.x"}
    assert imports("metrics.x", mod, known) == {"engine.search", "metrics", "config", "engine"}


def test_no_module_is_over_500_lines():
    """A module a newcomer can hold in their head: split it by responsibility past 500 lines."""
    long = {name or "avatar_metrics": n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > 500}
    assert long == {}


def test_the_benchmarks_use_no_private_name():
    """bench/ scripts are the product's benchmarks: they call what users call, so a refactoring of
    the package's insides never breaks them silently."""
    private = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("avatar_metrics"):
                private += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
                private += [f"{path.name}: {node.module}" for part in node.module.split(".") if part.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                private.append(f"{path.name}: .{node.attr}")
    assert private == []
