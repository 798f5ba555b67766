"""Shared test set-up: every test gets its own PITSTOP_HOME, never the user's ~/.pitstop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.prefect_server"]

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "pitstop-home"
    monkeypatch.setenv("PITSTOP_HOME", str(home))
    for var in list(os.environ):
        if var.startswith("PITSTOP_") and var not in {"PITSTOP_HOME"} and not var.startswith(
            "PITSTOP_TEST_"
        ):
            monkeypatch.delenv(var, raising=False)
    return home
