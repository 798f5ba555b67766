"""PostgreSQL for the store tests: a fresh database per test on the dev cluster's PostgreSQL.

`scripts/dev-cluster start` runs a private PostgreSQL on 127.0.0.1 and `scripts/dev-cluster env`
prints its URL as PITSTOP_TEST_POSTGRES_URL; `scripts/test` exports it, so in CI these tests
always run. Without the variable they skip and say how to get one; with it set but the server
not answering they FAIL (a broken database is not a reason to skip). Other areas' tests import
`fresh_database` / `postgres_url` from here (tests/flows/test_two_workers.py does).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from pitstop.store import Store

POSTGRES_URL_VAR = "PITSTOP_TEST_POSTGRES_URL"
NO_POSTGRES = (f"{POSTGRES_URL_VAR} is not set: no PostgreSQL to test on (scripts/test sets it; by hand: "
               "scripts/dev-cluster start && eval \"$(scripts/dev-cluster env)\")")


def postgres_base_url() -> str:
    """The dev cluster's PostgreSQL URL (postgresql+psycopg://...), or skip the test."""
    url = os.environ.get(POSTGRES_URL_VAR, "").strip()
    if not url:
        pytest.skip(NO_POSTGRES)
    return url


@contextmanager
def fresh_database(prefix: str = "pitstop_test") -> Iterator[str]:
    """A new, empty database on the test PostgreSQL; dropped afterwards (connections and all).
    A database per test, not a schema: PostgreSQL's advisory locks are per database, so tests
    running side by side never see each other's incident locks."""
    base = make_url(postgres_base_url())
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        pytest.fail(f"{POSTGRES_URL_VAR} is set but PostgreSQL does not answer there "
                    f"({base.render_as_string(hide_password=True)}): {exc.orig}; "
                    "start it with scripts/dev-cluster start", pytrace=False)
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same test on both databases Pitstop supports."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/pitstop.db"
        return
    with fresh_database() as url:
        yield url


@pytest.fixture
def any_store(store_url: str) -> Iterator[Store]:
    store = Store(store_url)
    yield store
    store.dispose()
