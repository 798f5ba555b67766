"""Versioned schema: new tables come from `create_all`; changes to existing tables are steps here.

Each step upgrades the schema from version N-1 to N. A database newer than this code is refused
rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.engine import Connection

# version -> step that brings a database at version-1 up to it. Version 1 is the initial schema.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}

SCHEMA_VERSION = 1 + len(MIGRATIONS)
