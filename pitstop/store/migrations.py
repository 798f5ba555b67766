"""Versioned schema: new tables come from `create_all`; changes to existing tables are steps here.

Each step upgrades the schema from version N-1 to N. A database newer than this code is refused
rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.engine import Connection


def _add_incident_labels(conn: Connection) -> None:
    # `pitstop label`: operators' corrections. create_all already made it on open; checkfirst
    # keeps the step safe either way, and the version says which databases may hold labels.
    from pitstop.store.tables import IncidentLabel

    IncidentLabel.__table__.create(conn, checkfirst=True)


# version -> step that brings a database at version-1 up to it. Version 1 is the initial schema.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    2: _add_incident_labels,
}

SCHEMA_VERSION = 1 + len(MIGRATIONS)
