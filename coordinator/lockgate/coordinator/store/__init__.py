"""The coordinator's state in SQL (SQLite or PostgreSQL): the only code that speaks SQL."""

from lockgate.coordinator.store.sql_store import SqlStore, open_store

__all__ = ["SqlStore", "open_store"]
