from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES


@pytest.fixture
def node_fixtures() -> Path:
    return FIXTURES / "node"
