"""Every records test of test_records.py again, on PostgreSQL (a fresh database per test).

The tests are the same functions; only the `store` fixture differs. Run with the dev cluster's
PostgreSQL (PITSTOP_TEST_POSTGRES_URL, see tests/store/conftest.py); without it they skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pitstop.store import Store
from tests.store import test_records as on_sqlite

# The same test functions, collected here a second time: they use this module's `store`.
globals().update({name: fn for name, fn in vars(on_sqlite).items() if name.startswith("test_") and callable(fn)})


@pytest.fixture
def store(postgres_url: str) -> Iterator[Store]:
    s = Store(postgres_url)
    assert s.engine.dialect.name == "postgresql"
    yield s
    s.dispose()
