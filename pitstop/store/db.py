"""The Store: one engine, schema checked and upgraded on open."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, create_engine, select

from pitstop.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from pitstop.store.migrations import MIGRATIONS, SCHEMA_VERSION
from pitstop.store.tables import SchemaVersion


class SchemaError(RuntimeError):
    """The database schema cannot be used by this version of Pitstop."""


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the wrapper, the CLI and flows write concurrently; busy_timeout waits, not fails.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Store:
    """Owns the engine. Create one per process and pass it down."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(url, pool_pre_ping=not url.startswith("sqlite"))
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
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
                session.commit()
                return
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
