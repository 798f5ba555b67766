"""The Store: one engine, schema checked and upgraded on open.

Many processes open a fresh store at once (20 `pitstop run` on a new PITSTOP_HOME): creating the
tables and the version row is serialised by a schema lock (a lock file next to a SQLite database,
an advisory lock on PostgreSQL), so none of them sees a half-made schema.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel, create_engine, select

from pitstop.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from pitstop.store.migrations import MIGRATIONS, SCHEMA_VERSION
from pitstop.store.tables import SchemaVersion


class SchemaError(RuntimeError):
    """The database schema cannot be used by this version of Pitstop."""


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the wrapper, the CLI and flows write concurrently; busy_timeout waits, not fails.
    # busy_timeout first: switching a new database to WAL needs a lock other openers may hold.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


# Any fixed number: every Pitstop process agrees on it (PostgreSQL advisory locks are global).
_PG_SCHEMA_LOCK = 0x5049_5453  # "PITS"


# A bare postgresql:// URL means psycopg2 to SQLAlchemy; Pitstop installs psycopg (3).
_PG_PREFIXES = ("postgresql://", "postgres://")


def with_driver(url: str) -> str:
    """`url` with Pitstop's PostgreSQL driver named when it names none."""
    for prefix in _PG_PREFIXES:
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def _sqlite_file(url: str) -> Path | None:
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
    return Path(path) if path and path != ":memory:" else None


@contextmanager
def schema_lock(url: str, engine: Engine) -> Iterator[None]:
    """Held while the schema is created or upgraded; other openers wait for it."""
    db_file = _sqlite_file(url)
    fd = None
    if db_file is not None:
        try:
            fd = os.open(f"{db_file}.schema-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:  # a read-only directory: this process cannot create a schema anyway
            fd = None
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock
    elif engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_SCHEMA_LOCK})
                conn.commit()
    else:
        yield


class Store:
    """Owns the engine. Create one per process and pass it down."""

    def __init__(self, url: str) -> None:
        url = self.url = with_driver(url)
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(url, pool_pre_ping=not url.startswith("sqlite"))
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        with schema_lock(url, self.engine):
            self._upgrade()

    @classmethod
    def from_settings(cls, settings) -> "Store":
        return cls(settings.effective_database_url)

    def _upgrade(self) -> None:
        SQLModel.metadata.create_all(self.engine)
        with Session(self.engine) as session:
            row = session.exec(select(SchemaVersion)).first()
            if row is None:
                session.add(SchemaVersion(id=1, version=SCHEMA_VERSION))
                try:
                    session.commit()
                    return
                except IntegrityError:  # a database no schema lock covers: another opener won
                    session.rollback()
                    row = session.exec(select(SchemaVersion)).one()
            if row.version > SCHEMA_VERSION:
                from pitstop.secrets import redact

                raise SchemaError(
                    f"database {redact(self.url)} has schema version {row.version}, but this Pitstop "
                    f"knows only up to {SCHEMA_VERSION}: upgrade Pitstop, or point "
                    "PITSTOP_DATABASE_URL at another database"
                )
            current = row.version
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with self.engine.begin() as conn:
                MIGRATIONS[version](conn)
                conn.exec_driver_sql(
                    "UPDATE pitstop_schema_version SET version = ? WHERE id = 1"
                    if self.url.startswith("sqlite")
                    else "UPDATE pitstop_schema_version SET version = %s WHERE id = 1",
                    (version,),
                )

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
