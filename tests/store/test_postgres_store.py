"""Opening a store on PostgreSQL: many fresh openers at once (the schema's advisory lock), the
URL forms operators write, and a database newer than this Pitstop refused with a clear error."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sqlalchemy import text
from sqlmodel import select

from pitstop.store import SchemaError, Store
from pitstop.store.tables import Run

from tests.store.test_fresh_store_concurrency import OPENER  # the same opener, on PostgreSQL


@pytest.mark.slow
def test_eight_processes_create_one_fresh_postgres_store_together(postgres_url: str) -> None:
    start = time.time() + 5  # time for 8 interpreters to import sqlmodel on 2 cores
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, postgres_url, str(start), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(8)]
    outputs = [(p.wait(90), p.stdout.read().decode(errors="replace")) for p in procs]
    failed = [out[-600:] for code, out in outputs if code]
    assert not failed, failed
    store = Store(postgres_url)
    try:
        with store.session() as s:
            assert sorted(s.exec(select(Run.id))) == sorted(f"r{i}" for i in range(8))
            assert s.exec(text("SELECT count(*) FROM pitstop_schema_version")).one()[0] == 1
    finally:
        store.dispose()


def test_a_plain_postgresql_url_gets_pitstops_driver(postgres_url: str) -> None:
    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://", 1)
    store = Store(plain)
    try:
        assert store.engine.dialect.name == "postgresql" and store.engine.dialect.driver == "psycopg"
        assert store.url.startswith("postgresql+psycopg://")
    finally:
        store.dispose()


def test_a_newer_schema_is_refused_with_the_password_masked(postgres_url: str) -> None:
    store = Store(postgres_url)
    with store.session() as s:
        s.exec(text("UPDATE pitstop_schema_version SET version = 99"))
        s.commit()
    store.dispose()
    with pytest.raises(SchemaError, match="schema version 99") as refused:
        Store(postgres_url)
    password = postgres_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert password not in str(refused.value)


def test_an_older_schema_is_upgraded_step_by_step_on_open(postgres_url: str) -> None:
    """The migration steps run on PostgreSQL too (their SQL and the version update's paramstyle)."""
    from pitstop.store.migrations import SCHEMA_VERSION

    store = Store(postgres_url)
    with store.session() as s:
        s.exec(text("UPDATE pitstop_schema_version SET version = 1"))
        s.commit()
    store.dispose()
    reopened = Store(postgres_url)
    try:
        with reopened.session() as s:
            assert s.exec(text("SELECT version FROM pitstop_schema_version")).one()[0] == SCHEMA_VERSION
    finally:
        reopened.dispose()
