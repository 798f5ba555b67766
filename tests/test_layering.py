"""The dependency direction is part of the design: core <- classifiers <- tasks <- flows <- deployments.

`pitstop.cli` is the composition root and may import any layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LAYERS = ["pitstop", "classifiers", "tasks", "flows", "deployments"]


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _layer_files(layer: str) -> list[Path]:
    root = REPO_ROOT / layer
    files = sorted(root.rglob("*.py"))
    if layer == "pitstop":
        files = [f for f in files if "cli" not in f.relative_to(root).parts]
    return files


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_only_lower_layers(layer: str) -> None:
    forbidden = set(LAYERS[LAYERS.index(layer) + 1 :])
    offenders = {
        str(f.relative_to(REPO_ROOT)): sorted(_imported_top_levels(f) & forbidden)
        for f in _layer_files(layer)
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"{layer} must not import higher layers: {offenders}"


def test_layers_exist() -> None:
    for layer in LAYERS:
        assert (REPO_ROOT / layer / "__init__.py").is_file(), layer


def _imported_modules(path: Path) -> set[str]:
    """Every absolute module a file imports (function-level imports included), as dotted names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_core_never_imports_the_cli() -> None:
    """`pitstop.cli` is the composition root: core modules (the wrapper included) never import it."""
    offenders = {
        str(f.relative_to(REPO_ROOT)): sorted(m for m in _imported_modules(f) if m == "pitstop.cli" or m.startswith("pitstop.cli."))
        for f in _layer_files("pitstop")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"core modules import the CLI: {offenders}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_cycles_between_modules_of_a_layer(layer: str) -> None:
    """No module imports (directly or through others) a module that imports it back, not even
    with a late import inside a function: e.g. classifiers.scan <-> classifiers.decide."""
    files = _layer_files(layer)
    modules = {_module_name(f): f for f in files}
    packages = {m for m, f in modules.items() if f.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {m for m in _imported_modules(path) if m in modules and m != name}
        # `from pkg import sub` names a submodule; `from pkg import func` the package itself.
        graph[name] = {m for m in targets if m not in packages or not any(t.startswith(m + ".") for t in targets)}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    # A package's __init__ re-exporting its submodules, which import the package back for a
    # name, is the one accepted shape (the package is the public face): only cycles among
    # plain modules are design errors.
    plain = [c for c in cycles if not any(m in packages for m in c)]
    assert not plain, f"import cycles in {layer}: {plain}"
