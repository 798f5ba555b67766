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
