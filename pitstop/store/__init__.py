"""Durable records: SQLModel tables on SQLite (default) or PostgreSQL (by URL)."""

from pitstop.store.db import SchemaError, Store

__all__ = ["SchemaError", "Store"]
