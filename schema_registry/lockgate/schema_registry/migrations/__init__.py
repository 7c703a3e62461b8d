"""Alembic migrations of the schema registry's tables (run at start by ``store.migrate``)."""
